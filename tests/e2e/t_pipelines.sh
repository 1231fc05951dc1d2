# t_pipelines.sh — pipeline{} as Kedro's own pipeline tests expect it
# (tests/pipeline/test_pipeline.py, test_pipeline_namespacing.py and
# test_node.py in the kedro repository): validated remapping, no silent nil,
# names the selections can give back, & and |, node identity, and errors
# that name every culprit.  Each error names the script's file:line and exits 2.

# Two steps, a -> b, that read "A" and the parameter lr, and a command that
# reads ${params.k}: the pipeline the remapping tests wrap.
inner_pipeline() {
    write conf/base/parameters.yml <<'Y'
lr: 0.1
g_lr: 0.2
k: 1
ns: { k: 2 }
Y
    write conf/base/catalog.yml <<'Y'
A: {type: text, path: a.txt}
ns.A: {type: text, path: ns_a.txt}
X: {type: text, path: x.txt}
Y
    write pipeline.lua <<'L'
local function f(x) return x end
local a = node{ func = f, name = "a", inputs = "A", outputs = "AA" }
local b = node{ func = f, name = "b", inputs = { "AA", "params:lr" }, outputs = "B" }
local c = node{ command = "echo ${params.k} > ${outputs.o}", name = "c", outputs = { o = "C" } }
local inner = pipeline{ a, b, c }
L
}

test_remapping_a_name_the_pipeline_does_not_have_is_an_error() {
    inner_pipeline
    cp pipeline.lua base.lua
    echo 'return pipeline{ inner, inputs = { AB = "X" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: inputs: the pipeline reads no dataset 'AB' (did you mean 'A'?)"
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, outputs = { "BB" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: outputs: no step of the pipeline makes 'BB' (did you mean 'B'?)"
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, parameters = { lrr = "global_lr" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: parameters: no step of the pipeline reads parameter 'lrr' (did you mean 'lr'?)"
    # a command's ${params.k} is a parameter the pipeline reads
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, namespace = "ns", parameters = { "k", lr = "lr" } }' >> pipeline.lua
    run_flow 0 list
    contains "$OUT" "ns.c"
    # every culprit at once
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, inputs = { "Q", "A" }, outputs = { "Z" }, parameters = { "kk" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: 3 of its mappings do not fit the pipeline it wraps:"
    contains "$ERR" "  inputs: the pipeline reads no dataset 'Q'"
    contains "$ERR" "  outputs: no step of the pipeline makes 'Z'"
    contains "$ERR" "  parameters: no step of the pipeline reads parameter 'kk' (did you mean 'k'?)"
}

test_remapping_keeps_inputs_inputs_and_outputs_outputs() {
    inner_pipeline
    cp pipeline.lua base.lua
    # AA is made inside: renaming it as an input would rename it everywhere
    echo 'return pipeline{ inner, inputs = { AA = "CC" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: inputs: 'AA' is made by step 'a' inside this pipeline, so it is not one of its inputs"
    # A is a free input: renaming it as an output would rename the input
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, outputs = { A = "C2" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: outputs: 'A' is an input of this pipeline, which none of its steps makes"
    # parameters belong under parameters =
    for p in '"params:lr"' '"parameters"' '{ ["params:lr"] = "x" }'; do
        cp base.lua pipeline.lua
        echo "return pipeline{ inner, inputs = $( [[ $p == \{* ]] && echo "$p" || echo "{ $p }" ) }" >> pipeline.lua
        run_flow 2 list
        contains "$ERR" "pipeline.lua:6: pipeline: inputs: '"
        contains "$ERR" "is a parameter: map parameters with parameters = {...}"
    done
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, parameters = { parameters = "all" } }' >> pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:6: pipeline: parameters: 'parameters' (the whole tree) cannot be renamed"
    # the same mappings, right, make the graph they say
    cp base.lua pipeline.lua
    echo 'return pipeline{ inner, namespace = "ns", inputs = { A = "X" }, outputs = { B = "Y" }, parameters = { lr = "g_lr" } }' >> pipeline.lua
    run_flow 0 list --format json
    contains "$OUT" '"inputs":	["X"]'
    contains "$OUT" '"inputs":	["ns.AA", "params:g_lr"]'
    contains "$OUT" '"outputs":	["Y"]'
}

test_a_nil_in_a_list_is_an_error_not_a_shorter_list() {
    write pipeline.lua <<'L'
local function f(x) return x end
local data_pipe = pipeline{ node{ func = f, name = "load", outputs = "raw" } }
local train_pipe = pipeline{ node{ func = f, name = "train", inputs = "raw", outputs = "model" } }
local eval_pipe = pipeline{ node{ func = f, name = "eval", inputs = "model", outputs = "score" } }
return pipeline{ data_pipe, trian_pipe, eval_pipe }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: pipeline: item 2 is nil (a misspelt or unset variable?)"
    sed -i 's/^return .*/return pipeline{ data_pipe, { train_pipe, evl_pipe, data_pipe } }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: pipeline: item 2 of item 2 is nil"
    sed -i 's/^return .*/return pipeline(dat_pipe)/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: pipeline: expected a list of nodes and pipelines, got nil"
    sed -i 's/^return .*/return pipeline(data_pipe, train_pipe)/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: pipeline: expected one list of nodes and pipelines (pipeline{a, b}), got 2 arguments"
    # the lists inside node{} and flow.command too
    sed -i 's/^return .*/return node{ func = f, name = "x", inputs = { "raw", modle, "score" } }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: node: inputs[2] is nil (a misspelt or unset variable?)"
    sed -i 's/^return .*/return node{ func = f, name = "x", outputs = { "a", nil, "b" } }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: node: outputs[2] is nil"
    sed -i 's/^return .*/return node{ func = f, name = "x", tags = { "a", tga, "b" } }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: node: tags[2] is nil"
    sed -i 's/^return .*/return node{ command = { "echo", ags, "b" }, name = "x" }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: flow.command: argument 2 is nil"
    sed -i 's/^return .*/return pipeline{ data_pipe, namespace = "n", inputs = { "raw", nope, "x" } }/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:5: pipeline: inputs[2] is nil"
    no_crash
}

test_names_and_tags_the_selections_cannot_give_are_refused() {
    for spec in 'name = "load,clean"' 'name = "load data"' 'tags = "a,b"' 'tags = { "ok", "two words" }' \
                'outputs = "raw,rows"' 'outputs = "raw rows"'; do
        write pipeline.lua <<L
local function f() return 1 end
return pipeline{
  node{ func = f, name = "fine", outputs = "fine_out" },
  node{ func = f, $spec },
}
L
        run_flow 2 list
        contains "$ERR" "pipeline.lua:4: node: "
        [[ $spec == *,* ]] && contains "$ERR" "contains a comma" || contains "$ERR" "contains a space"
    done
    write pipeline.lua <<'L'
local p = pipeline{ node{ func = function() return 1 end, name = "s", outputs = "o" } }
return pipeline{ p, tags = "nightly, weekly" }
L
    run_flow 2 list
    contains "$ERR" "pipeline.lua:2: pipeline: tag: 'nightly, weekly' contains a comma"
    sed -i 's/tags = .*/namespace = "my ns" }/' pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:2: pipeline: namespace: 'my ns' contains a space"
}

test_and_and_or_intersect_and_unite() {
    write pipeline.lua <<'L'
local function f(x) return 1 end
local a = node{ func = f, name = "a", outputs = "x" }
local b = node{ func = f, name = "b", inputs = "x", outputs = "y" }
local c = node{ func = f, name = "c", inputs = "y", outputs = "z" }
local p, q = pipeline{ a, b }, pipeline{ b, c }
print("and", tostring(p & q), "or", tostring(p | q), "node", tostring(a | c), tostring(a & p))
-- a step of q that only shares b's name is not in the intersection
local b2 = node{ func = f, name = "b", inputs = "x", outputs = "other" }
print("same name only", tostring(p & pipeline{ b2 }))
return p | q
L
    run_flow 0 list
    contains "$OUT" "and	pipeline{b}	or	pipeline{a, b, c}	node	pipeline{a, c}	pipeline{a}"
    contains "$OUT" "same name only	pipeline{}"
    sed -i 's/^return .*/return p \& 3/' pipeline.lua
    run_flow 2 list
    contains "$ERR" "pipeline.lua:10: cannot combine a pipeline with a number"
}

test_identical_steps_built_twice_are_one_step() {
    write pipeline.lua <<'L'
local function f(x) return 1 end
local function make() return node{ func = f, name = "a", outputs = "x", tags = "first" } end
local function cmd() return node{ command = { "touch", "${outputs.t}" }, name = "t", outputs = { t = "t" } } end
local p = pipeline{ make(), cmd() } + pipeline{ node{ func = f, name = "a", outputs = "x", tags = "second" }, cmd() }
print("steps", #p, table.concat(p.nodes[1].tags, ","))
return p
L
    run_flow 0 run
    contains "$OUT" "steps	2	first,second"
    contains "$ERR" "2 done"
    # one name, two different steps: still an error, at both lines
    write pipeline.lua <<'L'
local function f(x) return 1 end
return pipeline{ node{ func = f, name = "a", outputs = "x" },
                 node{ func = f, name = "a", outputs = "y" } }
L
    run_flow 2 run
    contains "$ERR" "two steps are named 'a'"
    contains "$ERR" "declared at pipeline.lua:2 and pipeline.lua:3"
    # ... and a different command body is a different step
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo 1 > ${outputs.o}", name = "a", outputs = { o = "x" } },
                 node{ command = "echo 2 > ${outputs.o}", name = "a", outputs = { o = "x" } } }
L
    run_flow 2 run
    contains "$ERR" "two steps are named 'a'"
}

# pipeline{}'s index of the steps by name (lua/name_map.c) is by the name ids
# of the first node's store; a node of another store is found by its name's
# text, or in a table when that store never interned its name.
test_steps_of_two_stores_are_each_kept_once() {
    write pipeline.lua <<'L'
local function f() return 1 end
local a = node{ func = f, outputs = "x", name = "a" }
local z = node{ func = f, outputs = "w", name = "z" }
require("flow.pipeline").new_store()
local b = node{ func = f, outputs = "x", name = "a" }      -- a's twin, of the second store
local c = node{ func = f, outputs = "y", name = "c" }
local p = pipeline{ c, a, b, z, { a, z, c }, pipeline{ b, z } }
local names = {}
for _, n in ipairs(p.nodes) do names[#names + 1] = n.name end
print("steps", table.concat(names, ","))
return p
L
    run_flow 0 run
    contains "$OUT" "steps	c,a,z"
    contains "$ERR" "3 done"
}

# A dataset named by itself (a lone name, or in a list) has one entry table
# for every step that names it (a pipeline of 100,000 steps keeps a third of
# the entries); a map's entry, which carries the step's own name for it, is
# the step's.  Namespacing gives new entries and leaves the shared ones alone.
test_steps_share_the_entry_of_a_dataset_they_name_by_itself() {
    write pipeline.lua <<'L'
local function f(x) return x end
local a = node{ func = f, name = "a", outputs = "x" }
local b = node{ func = f, name = "b", inputs = { "x" }, outputs = { "y" } }
local c = node{ func = f, name = "c", inputs = "x", outputs = { z = "z" } }
local d = node{ command = "cat ${inputs.i} > ${outputs.o}", name = "d", inputs = { i = "x" }, outputs = { o = "w" } }
local ns = pipeline{ pipeline{ b }, namespace = "ns", inputs = { "x" } }
print("shared", rawequal(a.outputs[1], b.inputs[1]), rawequal(b.inputs[1], c.inputs[1]))
print("own", rawequal(d.inputs[1], a.outputs[1]), d.inputs[1].arg, d.inputs[1].dataset, c.outputs[1].arg)
print("namespaced", ns.nodes[1].outputs[1].dataset, b.outputs[1].dataset, ns.nodes[1].inputs[1].dataset)
return pipeline{ a, b, c, d }
L
    run_flow 0 list
    contains "$OUT" "shared	true	true"
    contains "$OUT" "own	false	i	x	z"
    contains "$OUT" "namespaced	ns.y	y	x"
}

# The steps of one command line share one Command, as if the script had
# made it once with flow.command and named it in each node{} (a generated
# pipeline: one table, not two a step, and the plan walks it once): an
# argument list or a shell line the same as the last one's, without env or
# cwd of its own.  A number in the list, env, cwd, or another word makes
# its own; a node's env makes a copy; a misspelt field is still refused;
# and each step's references are still checked against its own names.
test_the_steps_of_one_command_line_share_one_command() {
    write pipeline.lua <<'L'
local function touch(name) return node{ command = { "touch", "${outputs.o}" }, outputs = { o = name }, name = name } end
local a, b = touch("a"), touch("b")
local s1 = node{ command = "echo ${outputs.o} > ${outputs.o}", outputs = { o = "s1" }, name = "s1" }
local s2 = node{ command = "echo ${outputs.o} > ${outputs.o}", outputs = { o = "s2" }, name = "s2" }
local e = node{ command = { "touch", "${outputs.o}", env = { A = "1" } }, outputs = { o = "e" }, name = "e" }
local n1, n2 = node{ command = { "true", 0 }, name = "n1" }, node{ command = { "true", 0 }, name = "n2" }
local x = node{ command = { "touch", "${outputs.o}", "x" }, outputs = { o = "x" }, name = "x" }
local ne = node{ command = { "touch", "${outputs.o}" }, env = { B = "2" }, outputs = { o = "ne" }, name = "ne" }
print("shared", rawequal(a.cmd, b.cmd), rawequal(s1.cmd, s2.cmd))
print("own", rawequal(a.cmd, e.cmd), rawequal(n1.cmd, n2.cmd), rawequal(a.cmd, x.cmd), rawequal(a.cmd, ne.cmd),
      a.cmd.env, ne.cmd.env.B)
print("typo", select(2, pcall(node, { command = { "touch", "${outputs.o}", evn = {} }, outputs = { o = "t" }, name = "t" })))
return pipeline{ a, b, s1, s2, e, x, ne }
L
    run_flow 0 run
    contains "$OUT" "shared	true	true"
    contains "$OUT" "own	false	false	false	false	nil	2"
    contains "$OUT" "typo	flow.command: unknown field 'evn' (did you mean 'env'?)"
    equals "$(cd .flow/data && echo *)" "a b e ne s1 s2 x" "the outputs"
    run_flow 0 run
    contains "$ERR" "0 done, 7 up to date"
    write bad.lua <<'L'
local nodes = {}
for i = 1, 3 do nodes[i] = node{ command = { "touch", "${outputs.o}" }, outputs = { o = "d" .. i }, name = "s" .. i } end
nodes[4] = node{ command = { "touch", "${outputs.o}" }, outputs = { out = "d4" }, name = "wrong" }
return pipeline(nodes)
L
    run_flow 2 run bad.lua
    contains "$ERR" "step 'wrong' (bad.lua:3): \${outputs.o}: the step has no output named 'o' (its outputs: out)"
    no_crash
}

# A node is a read-only handle on its record in C: every field reads as
# node{} was given it (a table field is the same table at each read), pairs()
# lists the fields it has, and writing one is an error naming what to do.
# A namespaced copy is a new record that keeps its original's body.
test_a_node_reads_as_it_was_declared_and_is_read_only() {
    write pipeline.lua <<'L'
local function f(x) return x end
local a = node{ func = f, name = "a", inputs = { "x", "params:lr" }, outputs = { o = "y" }, tags = { "t1", "t2" },
                retries = 2, timeout = 90, pool = "gpu", metrics = true }
local c = node{ command = { "echo", "${outputs.o}" }, outputs = { o = "z" }, name = "c", timeout = "1m30s",
                compute = "cpu-cluster", environment = "env:1", env = { A = "1" } }
print("a", a.name, a.kind, a.where, a.retries, a.timeout, a.pool, a.metrics, a.input_style, a.output_style,
      rawequal(a.fn, f), #a.inputs, a.inputs[2].dataset, a.outputs[1].arg, a.outputs[1].dataset,
      table.concat(a.tags, ","), rawequal(a.inputs, a.inputs), rawequal(a.tags, a.tags), a.cmd, a.dist)
print("c", c.kind, c.cmd.argv[1], c.cmd.env.A, c.timeout, c.compute, c.environment, c.instance_type, c.fn, #c.tags)
local keys = {}
for k in pairs(c) do keys[#keys + 1] = k end
print("pairs", table.concat(keys, ","))
print("write", select(2, pcall(function() a.name = "b" end)):match("a node is read%-only.*"))
local ns = pipeline{ a, namespace = "ns", parameters = { "lr" }, tags = "extra" }.nodes[1]
print("ns", ns.name, ns.namespace, rawequal(ns.fn, f), ns.inputs[1].dataset, ns.inputs[2].dataset,
      ns.outputs[1].arg, ns.outputs[1].dataset, table.concat(ns.tags, ","), ns.retries, ns.pool,
      rawequal(ns.origin, a), ns.where == a.where)
return pipeline{}
L
    run_flow 0 list
    contains "$OUT" "a	a	func	pipeline.lua:2	2	90	gpu	true	nil	map	true	2	params:lr	o	y	t1,t2	true	true	nil	nil"
    contains "$OUT" "c	command	echo	1	90	cpu-cluster	env:1	nil	nil	0"
    contains "$OUT" "pairs	name,where,kind,inputs,outputs,output_style,tags,timeout,cmd,compute,environment"
    contains "$OUT" "write	a node is read-only (pipeline{ namespace =, inputs =, outputs =, tags = } makes a changed copy)"
    contains "$OUT" "ns	ns.a	ns	true	ns.x	params:lr	o	ns.y	t1,t2,extra	2	gpu	true	true"
}

test_errors_name_every_culprit() {
    write pipeline.lua <<'L'
local function f(x) return 1 end
local inner = pipeline{ node{ func = f, name = "node1", outputs = "x" },
                        node{ func = f, name = "node2", inputs = "x", outputs = "y" } }
return pipeline{ inner, namespace = "ns" } + node{ func = f, name = "solo", outputs = "s" }
L
    run_flow 2 run --nodes node1
    contains "$ERR" "--nodes: no step named 'node1' (did you mean 'ns.node1'?)"
    run_flow 2 run --nodes node1,solo,slo,zzz
    contains "$ERR" "--nodes: no step named 'node1' (did you mean 'ns.node1'?), 'slo' (did you mean 'solo'?) or 'zzz'"
    run_flow 2 run --from-inputs W,Z
    contains "$ERR" "--from-inputs: no step reads 'W' or 'Z'"
    run_flow 2 run --to-outputs D,ns.y,E
    contains "$ERR" "--to-outputs: no step produces 'D'"
    contains "$ERR" "or 'E'"
    run_flow 2 run --from-inputs x
    contains "$ERR" "--from-inputs: no step reads 'x' (did you mean 'ns.x'?)"
    write pipeline.lua <<'L'
local function f(x) return 1 end
return pipeline{
  node{ func = f, name = "a", outputs = { "x", "y" } },
  node{ func = f, name = "b", outputs = { "x", "y" } },
  node{ func = f, name = "c", outputs = { "x" } },
}
L
    run_flow 2 run
    contains "$ERR" "2 datasets are produced by more than one step (a dataset has exactly one producer):"
    contains "$ERR" "'x', by 'a' (pipeline.lua:3), 'b' (pipeline.lua:4) and 'c' (pipeline.lua:5)"
    contains "$ERR" "'y', by 'a' (pipeline.lua:3) and 'b' (pipeline.lua:4)"
    write pipeline.lua <<'L'
local function f(x) return 1 end
return pipeline{
  node{ func = f, name = "d", outputs = "q" },
  node{ func = f, name = "d", outputs = "q2" },
  node{ func = f, name = "e", outputs = "q3" },
  node{ func = f, name = "e", outputs = "q4" },
  node{ func = f, name = "e", outputs = "q5" },
}
L
    run_flow 2 run
    contains "$ERR" "2 step names are used by more than one step"
    contains "$ERR" "'d' at pipeline.lua:3 and pipeline.lua:4"
    contains "$ERR" "'e' at pipeline.lua:5, pipeline.lua:6 and pipeline.lua:7"
}

# A distributed_job's "params:" counts are parameters the step reads: a
# namespace renames them and parameters = keeps or maps them, as it does
# "params:" inputs and a command's ${params.…}.
test_namespaces_rename_distributed_counts() {
    write conf/base/parameters.yml <<'Y'
workers: 2
ns: { workers: 3 }
Y
    write pipeline.lua <<'L'
local train = distributed_job{ framework = "pytorch", num_nodes = "params:workers" }(function() return 1 end)
local p = pipeline{ node{ func = train, name = "train", outputs = "model" } }
return pipeline{ p, namespace = "ns" } + pipeline{ p, namespace = "kept", parameters = { "workers" } }
L
    run_flow 0 list --format json
    contains "$OUT" '"name":	"ns.train"'
    contains "$OUT" '"distribution":	"PyTorch 3 nodes x 1 process"'
    contains "$OUT" '"distribution":	"PyTorch 2 nodes x 1 process"'
}

test_empty_lists_print_as_json_arrays() {
    echo 'return pipeline{}' > pipeline.lua
    run_flow 0 list --format json
    equals "$OUT" "[]" "steps of an empty pipeline"
    run_flow 0 catalog list --format json
    equals "$OUT" "[]" "datasets of an empty pipeline"
}

# Steps whose records are in two stores (a store per script load; here one
# made mid-script): the plan's one pass over the steps (dag.scan, which asks
# a store's bits whether an input was produced before it, and the other
# store's names the long way) finds every producer whatever the order, and
# still names an input nothing produces.
test_steps_of_two_stores_find_their_producers_in_any_order() {
    write pipeline.lua <<'L'
local early = node{ func = function(x) return x + 1 end, inputs = "late_out", outputs = "early_out", name = "early" }
require("flow.pipeline").new_store()
local late = node{ func = function() return 1 end, outputs = "late_out", name = "late" }
local last = node{ func = function(a, b) return a + b end, inputs = { "early_out", "late_out", os.getenv("EXTRA") },
                   outputs = "sum", name = "last" }
return pipeline{ last, early, late }
L
    run_flow 0 run
    contains "$ERR" "3 done"
    EXTRA=ghost run_flow 2 run
    contains "$ERR" "'ghost', needed by 'last' (pipeline.lua:4)"
    # the suggestion comes from every produced dataset, 'early' of the other store too
    EXTRA=early_ou run_flow 2 run
    contains "$ERR" "'early_ou', needed by 'last' (pipeline.lua:4) (did you mean 'early_out'?)"
}
