#!/usr/bin/env bash
# The HTML reports rendered in a real browser: tests/html/run.sh /path/to/vramlua
# Headless Chromium (Debian's `chromium`, installed here when missing and we
# are root) renders each page; the test reads the rendered DOM (labels,
# one area per category, one bar per configuration) and a screenshot (not
# blank, the category colours drawn). Exit 77 (skipped) with the reason
# when no browser can be had.
set -u
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 /path/to/vramlua" >&2
  exit 2
fi
V=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

browser=""
find_browser() {
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then browser=$b; return 0; fi
  done
  return 1
}
if ! find_browser; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "html: installing chromium (apt-get install chromium)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }
  fi
  find_browser || {
    echo "html: SKIPPED: no headless browser (install Debian's chromium package as root:" \
      "apt-get install chromium)"
    exit 77
  }
fi
command -v python3 >/dev/null 2>&1 || {
  echo "html: SKIPPED: python3 is needed to read the screenshot"
  exit 77
}

D=$(mktemp -d "${TMPDIR:-/tmp}/vramlua-html.XXXXXX") || exit 2
trap 'rm -rf "$D"' EXIT
unset VRAMLUA_PATH
passed=0
failed=0
check() { # NAME CONDITION-EXIT-STATUS [detail]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL $1${3:+: $3}"; fi
}
# Chromium refuses to run as root without --no-sandbox; its own profile
# stays in the scratch directory.
render() { # PAGE MODE(OUT: dump|png) OUTFILE
  local flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars
    --user-data-dir="$D/profile" --window-size=1100,900)
  if [ "$2" = dump ]; then
    timeout 60 "$browser" "${flags[@]}" --dump-dom "file://$1" >"$3" 2>"$D/browser.log"
  else
    timeout 60 "$browser" "${flags[@]}" --screenshot="$3" "file://$1" >"$D/browser.log" 2>&1
  fi
}
has() { grep -qF -- "$2" "$1"; }

printf 'model: { preset: qwen2_5_1_5b_instruct, overrides: { num_hidden_layers: 2 } }\nrun: { batch: 2, seq: 256, grad_checkpointing: full, gpu: rtx4090 }\n' \
  >"$D/small.yaml"

# ---- one estimate: the timeline page
(cd "$D" && "$V" estimate small.yaml --html page.html >estimate.txt 2>&1)
check "estimate --html exits 0 and says where it wrote" $? "$(head -c 300 "$D/estimate.txt")"
has "$D/estimate.txt" "html: wrote page.html"; check "estimate names the page" $?
# self-contained: nothing fetched, no script
! grep -qiE '<script|src=|href=|url\(|@import' "$D/page.html"
check "the page fetches nothing and runs no script" $?
render "$D/page.html" dump "$D/dom.html"
check "chromium renders the page (dump-dom)" $? "$(tail -c 300 "$D/browser.log")"
for label in "Memory timeline" "Breakdown at the peak" "peak-note" "live at the peak:" \
  ">setup<" ">forward<" ">backward<" ">optimizer<" 'data-part="recompute"' \
  'data-category="weights"' 'data-category="optimizer_state"' 'data-category="gradients"' \
  'data-category="activations"' 'id="breakdown"' "FITS on" "allocator events in step order"; do
  has "$D/dom.html" "$label"; check "the rendered page has $label" $?
done
# the annotation names the same peak as the terminal report
peak=$(sed -n 's/^peak (tensors allocated): \([0-9.]* GiB\).*/\1/p' "$D/estimate.txt")
[ -n "$peak" ] && has "$D/dom.html" "peak $peak"
check "the annotated peak is the terminal's ($peak)" $?
render "$D/page.html" png "$D/page.png"
check "chromium takes a screenshot" $? "$(tail -c 300 "$D/browser.log")"
python3 "$here/png_check.py" "$D/page.png" 4477aa ccbb44 228833 >"$D/png.txt" 2>&1
check "the screenshot is drawn: weights, optimizer state and gradients areas" $? \
  "$(tr '\n' ' ' <"$D/png.txt")"

# ---- a parallel: layout: the largest rank's timeline, named
spec_dir=$(cd "$here/../../examples/specs" && pwd)
(cd "$D" && "$V" estimate "$spec_dir/qwen2_5_7b_tp2_pp2_dp2.yaml" --html layout.html >layout.txt 2>&1)
check "estimate --html of a layout exits 0" $? "$(head -c 300 "$D/layout.txt")"
render "$D/layout.html" dump "$D/layout_dom.html"
largest=$(sed -n 's/^== \(.*\) (ranks \([0-9-]*\)): peak \([0-9.]* GiB\) .*/\2 \3/p' "$D/layout.txt" |
  sort -k2 -g -r | head -n 1)
ranks=${largest%% *}
peak=${largest#* }
[ -n "$ranks" ] && has "$D/layout_dom.html" "Memory timeline of the largest rank (ranks $ranks)"
check "the layout page draws the largest rank's timeline ($ranks)" $?
has "$D/layout_dom.html" "peak $peak"; check "at that rank's peak ($peak)" $?
render "$D/layout.html" png "$D/layout.png"
python3 "$here/png_check.py" "$D/layout.png" 4477aa ccbb44 228833 >"$D/png4.txt" 2>&1
check "the layout screenshot is drawn" $? "$(tr '\n' ' ' <"$D/png4.txt")"

# ---- the reconciliation with an observed figure, on the page too
(cd "$D" && "$V" estimate small.yaml --observed 9GB --html observed.html >obs.txt 2>&1)
check "estimate --observed --html exits 0" $? "$(head -c 300 "$D/obs.txt")"
render "$D/observed.html" dump "$D/obs_dom.html"
has "$D/obs_dom.html" "Observed vs estimated"; check "the page has the reconciliation" $?
first=$(grep -m1 "^likeliest causes" "$D/obs.txt")
[ -n "$first" ] && has "$D/obs_dom.html" "$first"
check "the page's reconciliation is the terminal's" $?

# ---- one bar per configuration: sweep
(cd "$D" && "$V" sweep small.yaml --batch 1,2 --seq 128,256,512 --gpu rtx4090 \
  --html sweep.html >sweep.txt 2>&1)
check "sweep --html exits 0" $? "$(head -c 300 "$D/sweep.txt")"
render "$D/sweep.html" dump "$D/sweep_dom.html"
bars=$(grep -o 'class="cfg"' "$D/sweep_dom.html" | wc -l)
[ "$bars" -eq 6 ]; check "six configurations, six bars" $? "found $bars"
has "$D/sweep_dom.html" "batch 2, seq 512"; check "bars are labelled" $?
has "$D/sweep_dom.html" 'id="budget"'; check "the GPU is drawn as a line" $?
render "$D/sweep.html" png "$D/sweep.png"
python3 "$here/png_check.py" "$D/sweep.png" 4477aa >"$D/png2.txt" 2>&1
check "the sweep screenshot is drawn" $? "$(tr '\n' ' ' <"$D/png2.txt")"

# ---- one bar per configuration: fit --knobs, stacked by category
(cd "$D" && "$V" fit small.yaml --gpu rtx4090 --knobs --html knobs.html >knobs.txt 2>&1)
check "fit --knobs --html exits 0" $? "$(head -c 300 "$D/knobs.txt")"
render "$D/knobs.html" dump "$D/knobs_dom.html"
listed=$(grep -cE '^ *[0-9]+\. ' "$D/knobs.txt")
cfgs=$(grep -o 'class="cfg"' "$D/knobs_dom.html" | wc -l)
[ "$listed" -ge 2 ] && [ "$cfgs" -eq "$listed" ]
check "one bar per listed combination" $? "listed $listed, bars $cfgs"
for label in "as given" "fused linear cross-entropy (Liger)" 'id="budget"' "optimizer_state"; do
  has "$D/knobs_dom.html" "$label"; check "the knobs page has $label" $?
done
render "$D/knobs.html" png "$D/knobs.png"
python3 "$here/png_check.py" "$D/knobs.png" ccbb44 4477aa >"$D/png3.txt" 2>&1
check "the knobs screenshot is drawn" $? "$(tr '\n' ' ' <"$D/png3.txt")"

echo "html: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
