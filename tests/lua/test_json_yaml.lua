-- vram.json and vram.yaml: decoding, exact integers, encoding, errors with
-- their data locations, anchors, alias bombs, files.
local vram = require("vram")
local json, yaml = vram.json, vram.yaml

-- json.decode: values and exact numbers
local v = json.decode('{"a": [1, 2.5, "x", true, false, null], "b": {}}')
T.eq(v.a[1], 1, "integer element")
T.eq(math.type(v.a[1]), "integer", "1 decodes as an integer")
T.eq(v.a[2], 2.5, "float element")
T.eq(v.a[6], json.null, "null decodes to the sentinel")
T.eq(#v.a, 6, "null keeps its array slot")
T.eq(next(v.b), nil, "empty object")
T.eq(json.decode("9007199254740993"), 9007199254740993, "2^53+1 exact")
T.eq(json.decode("-9223372036854775808"), math.mininteger, "int64 min exact")
T.eq(math.type(json.decode("9223372036854775808")), "float", "beyond int64 is a float")
T.eq(math.type(json.decode("1.0")), "float", "1.0 stays a float")
T.eq(json.decode("1e2"), 100.0, "exponent")
T.eq(json.decode('"\\u00e9\\u20ac\\ud83d\\ude00"'), "é€😀", "\\u escapes and surrogate pair")
T.eq(json.decode('"a\\"b\\\\c\\/\\n\\t"'), 'a"b\\c/\n\t', "simple escapes")
T.eq(json.decode('{"k": 1, "k": 2}').k, 2, "duplicate keys: last wins")

-- json.decode: errors carry CHUNK:LINE:COL
T.raises(function() json.decode("") end, "json:1:1: json: empty input")
T.raises(function() json.decode("[1, 2}") end, "json:1:6: json: expected ',' or ']' but found '}'")
T.raises(function() json.decode('{"a": 1]') end, "expected ',' or '}'")
T.raises(function() json.decode("[1,]") end, "json:1:4: json: unexpected ']'")
T.raises(function() json.decode('{"a":\n[1,\n2', "cfg.json") end,
  "cfg.json:3:2: json: expected ',' or ']' but found end of input")
T.raises(function() json.decode('["abc') end, "json:1:2: json: unterminated string")
-- Python's allow_nan literals: refused by name, with what to do; a prefix of
-- one (read to the end of the input) is the ordinary error, never past it
T.raises(function() json.decode('{"t": [0.0,\n Infinity]}') end,
  "json:2:2: json: Infinity is not JSON (Python's json.dump writes it for a non-finite float)")
T.raises(function() json.decode("[-Infinity]") end, "json:1:2: json: -Infinity is not JSON")
T.raises(function() json.decode("NaN") end, "json:1:1: json: NaN is not JSON")
T.raises(function() json.decode("[-Infinit") end, "json:1:2: json: invalid number")
T.raises(function() json.decode("[Na") end, "json:1:2: json: unexpected 'N'")
T.raises(function() json.decode("[nan]") end, "did you mean 'null'")
T.raises(function() json.decode('[\n  "a\\q"]') end, "json:2:5: json: invalid escape '\\q'")
T.raises(function() json.decode('"\\ud83d"') end, "unpaired surrogate")
T.raises(function() json.decode('"a\255"') end, "json:1:3: json: invalid UTF-8")
T.raises(function() json.decode("1e400") end, "json: number out of range")
T.raises(function() json.decode("01") end, "invalid number")
T.raises(function() json.decode("1 2") end, "json:1:3: json: trailing characters")
T.raises(function() json.decode(string.rep("[", 201) .. string.rep("]", 201)) end,
  "json:1:201: json: nesting deeper than 200")

-- json.encode
T.eq(json.encode({1, 2, 3}), "[1,2,3]", "array")
T.eq(json.encode({b = 1, a = {true, false}, c = json.null}), '{"a":[true,false],"b":1,"c":null}',
  "object keys sorted, null sentinel")
T.eq(json.encode({}), "{}", "empty table is an object")
T.eq(json.encode(9007199254740993), "9007199254740993", "integers exact")
T.eq(json.encode(math.mininteger), "-9223372036854775808", "int64 min exact")
T.eq(json.encode(1.0), "1.0", "integral float keeps its '.0'")
T.eq(json.encode(0.1), "0.1", "shortest round-trip float")
T.eq(json.encode('a"b\n\0é'), '"a\\"b\\n\\u0000é"', "string escapes")
T.raises(function() json.encode({1, 2, x = 3}) end, "json.encode: table mixes array and object keys")
T.raises(function() json.encode({[1] = 1, [3] = 3}) end, "sparse array")
T.raises(function() json.encode({[true] = 1}) end, "table key of type boolean")
T.raises(function() json.encode(0 / 0) end, "non-finite")
T.raises(function() json.encode(math.huge) end, "non-finite")
T.raises(function() json.encode(print) end, "cannot encode a function")
local cyc = {}
cyc.self = cyc
T.raises(function() json.encode(cyc) end, "cycle")

-- round trips
local doc = {n = 9007199254740993, f = 1 / 3, neg = -0.5, s = "é\0", l = {1, "two", json.null, {k = "v"}}}
local rt = json.decode(json.encode(doc))
T.eq(rt.n, doc.n, "round trip: int64")
T.eq(math.type(rt.n), "integer", "round trip: integer stays integer")
T.eq(rt.f, 1 / 3, "round trip: float bits")
T.eq(rt.l[3], json.null, "round trip: null")
T.eq(json.encode(rt), json.encode(doc), "round trip: stable text")
T.eq(json.encode(json.decode(json.encode(doc, true))), json.encode(doc), "indented output decodes")

-- yaml.decode: core schema typing
local y = yaml.decode([[
name: llama
layers: 32
hidden: 0x1000
mode: 0o17
big: 9007199254740993
ratio: 0.5
flags: [true, False, yes]
none: ~
empty:
quoted: "42"
tagged: !!str 7
version: 1.2.3
]])
T.eq(y.name, "llama", "plain string")
T.eq(y.layers, 32, "decimal int")
T.eq(math.type(y.layers), "integer", "yaml int is a Lua integer")
T.eq(y.hidden, 4096, "hex int")
T.eq(y.mode, 15, "octal int")
T.eq(y.big, 9007199254740993, "yaml int exact")
T.eq(y.ratio, 0.5, "float")
T.eq(y.flags[2], false, "False is a boolean")
T.eq(y.flags[3], "yes", "yes stays a string (YAML 1.2)")
T.eq(y.none, yaml.null, "~ is null")
T.eq(y.empty, json.null, "empty value is null, same sentinel as json")
T.eq(y.quoted, "42", "quoted scalars are strings")
T.eq(y.tagged, "7", "!!str forces a string")
T.eq(y.version, "1.2.3", "non-number stays a string")

-- anchors and aliases
local a = yaml.decode("base: &b {lr: 0.1, steps: 10}\nrun: *b\nkey: &s text\ncopy: *s\n")
T.eq(a.run.steps, 10, "alias expands")
T.ok(a.run ~= a.base, "an alias is a copy")
T.eq(a.copy, "text", "scalar alias")

-- yaml errors
T.raises(function() yaml.decode("") end, "yaml: empty document")
T.raises(function() yaml.decode("a: 1\n---\nb: 2\n", "cfg.yaml") end,
  "cfg.yaml:2: yaml: multiple documents are not supported")
T.raises(function() yaml.decode("a: 1\na: 2\n") end, "yaml:2:1: yaml: duplicate key 'a'")
T.raises(function() yaml.decode("? [1, 2]\n: x\n") end, "mapping keys must be scalars")
T.raises(function() yaml.decode("a: *nope\n") end, "yaml:1:4: yaml: unknown anchor 'nope'")
T.raises(function() yaml.decode("x: 9223372036854775808\n") end, "yaml:1:4: yaml: integer out of range")
T.raises(function() yaml.decode("x: .inf\n") end, "non-finite number")
T.raises(function() yaml.decode("a: [1, 2\n") end, "yaml:2:1: yaml: did not find expected ',' or ']'")
T.raises(function() yaml.decode("a: b: c\n") end, "yaml:1:5: yaml: mapping values are not allowed")
T.raises(function() yaml.decode(string.rep("[", 201) .. string.rep("]", 201)) end,
  "nesting deeper than 200")
local bomb, prev = {"a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"}, "a"
for _, n in ipairs({"b", "c", "d", "e", "f", "g", "h", "i"}) do
  bomb[#bomb + 1] = n .. ": &" .. n .. " [" .. string.rep("*" .. prev .. ", ", 9) .. "*" .. prev .. "]"
  prev = n
end
T.raises(function() yaml.decode(table.concat(bomb, "\n")) end,
  "yaml: document expands to more than 1000000 nodes (alias bomb?)")

-- files
local jp = T.tmpfile('{\n "a": [1,\n  2,]\n}')
T.raises(function() json.load(jp) end, jp .. ":3:5: json: unexpected ']'")
T.eq(json.load(T.tmpfile('{"a": 1}')).a, 1, "json.load")
T.eq(yaml.load(T.tmpfile("a: [1, 2]\n")).a[2], 2, "yaml.load")
local yp = T.tmpfile("a: 1\nb: [x\n")
T.raises(function() yaml.load(yp) end, yp .. ":3:1: yaml:")
T.raises(function() json.load("/nonexistent/x.json") end, "/nonexistent/x.json: cannot open:")
local dir = jp:match("^(.*)/[^/]*$")
T.raises(function() json.load(dir) end, dir .. ": is a directory")
T.raises(function() yaml.load(dir) end, dir .. ": is a directory")

-- yaml to json
T.eq(json.encode(yaml.decode("b: [1, 2.5, ~]\na: x\n")), '{"a":"x","b":[1,2.5,null]}', "yaml -> json")
-- with lines asked for: the line of every key and sequence item, by table
do
  local v, at = yaml.decode("run:\n  batch: 2\n  lora:\n    targets:\n      - q_proj\n      - v_proj\n",
    "s.yaml", true)
  T.eq(at[v].run, 1)
  T.eq(at[v.run].batch, 2)
  T.eq(at[v.run].lora, 3)
  T.eq(at[v.run.lora.targets][2], 6, "a sequence item's line")
  T.eq(select("#", yaml.decode("a: 1\n")), 1, "one value unless lines are asked for")
end
