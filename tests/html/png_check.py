"""Is a PNG screenshot a drawn page? Prints what it found; exit 1 if blank.

usage: png_check.py FILE.png HEXCOLOR...  (colours that must cover pixels)
Standard library only: zlib and struct decode 8-bit RGB/RGBA PNGs."""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                sys.exit(f"{path}: unsupported PNG (depth {depth}, colour type {ctype})")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    out = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        out.extend(tuple(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return w, h, out


def main():
    w, h, px = pixels(sys.argv[1])
    counts = {}
    for p in px:
        counts[p] = counts.get(p, 0) + 1
    white = counts.get((255, 255, 255), 0)
    inked = 1 - white / len(px)
    print(f"{w}x{h}, {len(counts)} colours, {inked:.1%} of pixels not white")
    ok = inked > 0.02 and len(counts) > 20
    for hexc in sys.argv[2:]:
        rgb = tuple(int(hexc.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
        n = counts.get(rgb, 0)
        print(f"{hexc}: {n} pixels")
        ok = ok and n > 200
    sys.exit(0 if ok else 1)


main()
