-- What `estimate` and `diff` accept as one input: a run spec (YAML or
-- JSON), a measured truth case (a file holding a list of cases needs the
-- case's id), or another tool's config (stdlib/formats.lua).
local errors = require("stdlib.errors")
local spec = require("stdlib.spec")

local M = {}

-- The case `case_id` of a decoded file: the file itself when it holds one.
function M.pick_case(doc, path, case_id, flag)
  if type(doc) == "table" and doc[1] ~= nil then
    if not case_id then errors.usage(path .. " holds several cases: pick one with " .. flag .. " ID") end
    for _, c in ipairs(doc) do if c.id == case_id then return c end end
    errors.input(path, flag, "no case with id '" .. case_id .. "'")
  elseif case_id and doc.id ~= case_id then
    errors.input(path, flag, "the file holds case '" .. tostring(doc.id) .. "'")
  end
  return doc
end

-- The normalized run of path, with no translation options. registry:
-- models/registry.lua (the caller passes it: stdlib never requires models).
function M.load(path, case_id, flag, registry)
  local run, tr, doc = require("stdlib.formats").load_run(path, {}, registry)
  if tr and tr.spec.serve and not tr.spec.serve.colocate then
    errors.usage(path .. " is a vLLM serving config: `vramlua estimate` prices it")
  end
  if run then return run end
  return spec.normalize(M.pick_case(doc, path, case_id, flag), path, registry)
end

return M
