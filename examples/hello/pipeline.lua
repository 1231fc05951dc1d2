-- examples/hello: three Lua steps and one command step.
--   flow run            (from this directory)
--   flow list
local flow = require("flow")

-- Lua steps take their inputs as arguments and return their outputs.
local function make_words()
  return { "the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog" }
end

local function count_words(words)
  local counts = {}
  for _, w in ipairs(words) do counts[w] = (counts[w] or 0) + 1 end
  return counts, #words
end

-- A command step: ${inputs.x} is a file (Lua values arrive as JSON),
-- ${outputs.y} a path the command writes; the argv never goes through a shell.
-- A string command goes through /bin/sh; expanded paths are quoted for it.
local longest_word = flow.command "tr -c '[:alnum:]\\n' '\\n' < ${inputs.words} | awk 'length > length(best) { best = $0 } END { print best }' > ${outputs.longest_word}"

local function report(counts, total, longest_file)
  local f = assert(io.open(longest_file))
  local word = f:read("l")
  f:close()
  local keys = {}
  for w in pairs(counts) do keys[#keys + 1] = w end
  table.sort(keys)
  print(string.format("%d words, %d distinct; longest: %s", total, #keys, word))
  for _, w in ipairs(keys) do print(string.format("  %-6s %d", w, counts[w])) end
  return total
end

return pipeline{
  node{ func = make_words, outputs = "words" },
  node{ func = count_words, inputs = "words", outputs = { "counts", "total" } },
  node{ command = longest_word, inputs = "words", outputs = "longest_word", name = "longest_word" },
  node{ func = report, inputs = { "counts", "total", "longest_word" }, outputs = "summary" },
}
