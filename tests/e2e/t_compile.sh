# t_compile.sh — flow compile: the pipeline as an Azure ML pipeline job (az ml
# CLI v2 YAML).  Every YAML is checked by tests/aml/pipeline_yaml.py against
# the documented schema (keys, enums, reference forms, bindings, local paths)
# and read back as a DAG, compared with `flow list --format json`.

CHECK="/usr/bin/python3 $FLOW_ROOT/tests/aml/pipeline_yaml.py"

compile_project() {
    write conf/prod/azureml.yml <<'Y'
subscription_id: 00000000-0000-0000-0000-000000000000
resource_group: rg
workspace: ws
experiment_name: exp
compute:
  __default__: cpu-cluster
  gpu: gpu-cluster
environment: azureml:train-env:3
environment_variables:
  OMP_NUM_THREADS: "1"
Y
    write conf/base/parameters.yml <<'Y'
lr: 0.01
epochs: 3
workers: 2
Y
    write conf/prod/parameters.yml <<'Y'
epochs: 30
workers: 4
Y
    write conf/base/catalog.yml <<'Y'
raw: {type: file, path: data/raw.csv}
model: {type: folder, path: data/model}
Y
    write data/raw.csv <<'C'
a,b
C
    write pipeline.lua <<'L'
local train = distributed_job{ framework = "pytorch", num_nodes = "params:workers", processes_per_node = 2 }(
  flow.command{ "sh", "-c", "mkdir -p \"$1\" && cp \"$0\" \"$1/m\"", "${inputs.feats}", "${outputs.model}" })
return pipeline{
  node{ command = "cat ${inputs.raw} > ${outputs.feats}", inputs = { raw = "raw" }, outputs = { feats = "features" },
        name = "prep" },
  node{ func = train, inputs = { feats = "features" }, outputs = { model = "model" }, name = "train", tags = { "gpu" } },
  node{ command = "echo ${params.epochs} ${params.lr} > ${outputs.r}", inputs = { m = "model" }, outputs = { r = "report" },
        name = "eval.report" },
}
L
}

# check_yaml FILE [ARGS...] — the schema check and the round trip against flow list
check_yaml() {
    local f=$1; shift
    "$FLOW" list --env prod --format json >dag.json
    $CHECK "$f" --dag dag.json "$@" || { echo "--- $f"; cat "$f"; return 1; }
}

test_compiles_to_a_valid_pipeline_job_with_the_same_dag() {
    compile_project
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    contains "$OUT" '$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json'
    contains "$OUT" 'type: pipeline'
    contains "$OUT" 'default_compute: azureml:cpu-cluster'
    contains "$OUT" 'experiment_name: exp'
    # data between steps stays on Azure ML: bound job to job
    contains "$OUT" 'feats: "${{parent.jobs.prep.outputs.feats}}"'
    contains "$OUT" 'm: "${{parent.jobs.train.outputs.model}}"'
    # the distributed step: its compute (tag gpu), nodes from conf/prod, processes
    py_yaml p.yml 'j = d["jobs"]["train"]; print(j["compute"], j["resources"]["instance_count"], j["distribution"])' >t.txt
    contains "$(cat t.txt)" "azureml:gpu-cluster 4 {'type': 'pytorch', 'process_count_per_instance': 2}"
    # parameters resolved for the environment, into the command
    py_yaml p.yml 'print(d["jobs"]["eval_report"]["command"])' >t.txt
    contains "$(cat t.txt)" "echo 30 0.01 > '\${{outputs.r}}'"
    # a dotted step name: an identifier as the key, the name as display_name
    py_yaml p.yml 'print(d["jobs"]["eval_report"]["display_name"], d["jobs"]["eval_report"]["tags"])' >t.txt
    contains "$(cat t.txt)" "eval.report {'flow.step': 'eval.report'}"
    # the raw data, a local file: uploaded by the CLI from a path relative to the YAML
    py_yaml p.yml 'print(d["jobs"]["prep"]["inputs"]["raw"], d["jobs"]["prep"]["code"])' >t.txt
    contains "$(cat t.txt)" "{'type': 'uri_file', 'path': 'data/raw.csv', 'mode': 'ro_mount'} ."
    py_yaml p.yml 'print(d["jobs"]["prep"]["environment_variables"], d["jobs"]["prep"]["environment"])' >t.txt
    contains "$(cat t.txt)" "{'OMP_NUM_THREADS': '1'} azureml:train-env:3"
    # --params apply too
    run_flow 0 compile --env prod --params epochs=7
    contains "$OUT" "echo 7 0.01"
}

# py_yaml FILE CODE — runs CODE with d = the YAML as PyYAML reads it
py_yaml() {
    /usr/bin/python3 -c "import yaml,sys; d = yaml.safe_load(open(sys.argv[1])); exec(sys.argv[2])" "$1" "$2"
}

test_output_file_paths_are_relative_to_it() {
    compile_project
    mkdir -p build/aml
    run_flow 0 compile --env prod -o build/aml/pipeline.yml
    [ -z "$OUT" ]
    check_yaml build/aml/pipeline.yml
    py_yaml build/aml/pipeline.yml 'print(d["jobs"]["prep"]["code"], d["jobs"]["prep"]["inputs"]["raw"]["path"])' >t.txt
    contains "$(cat t.txt)" "../.. ../../data/raw.csv"
    # from another directory, with the script named
    mkdir -p elsewhere && cd elsewhere
    run_flow 0 compile ../pipeline.lua --env prod -o p.yml
    cd ..
    check_yaml elsewhere/p.yml
    py_yaml elsewhere/p.yml 'print(d["jobs"]["prep"]["code"])' >t.txt
    contains "$(cat t.txt)" ".."
}

test_slicing_takes_outside_inputs_from_the_last_run() {
    compile_project
    run_flow 0 compile --env prod --to-nodes train
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml --steps prep,train
    # a dataset an unselected step makes, with no run yet: named, exit 2
    run_flow 2 compile --env prod --nodes eval.report
    contains "$ERR" "'model' (folder dataset, conf/base/catalog.yml"
    contains "$ERR" "produced by 'train'"
    # after a local run the catalog's folder is there: uploaded from it
    run_flow 0 run -q
    run_flow 0 compile --env prod --from-nodes eval.report -o p2.yml
    check_yaml p2.yml --steps eval.report
    # az ml would upload .flow/ with the code: said, until .amlignore leaves it out
    contains "$ERR" "add a line '.flow/' to .amlignore"
    # the rules as az ml reads them (gitignore patterns, .amlignore first)
    printf '.flow/\n!.flow/\n' >.amlignore
    run_flow 0 compile --env prod --from-nodes eval.report -o p2.yml
    contains "$ERR" "add a line '.flow/' to .amlignore" "with .flow/ put back by !.flow/"
    rm .amlignore
    echo '.*' >.gitignore
    run_flow 0 compile --env prod --from-nodes eval.report -o p2.yml
    equals "$ERR" "" "stderr with .gitignore's '.*'"
    rm .gitignore
    echo '.flow/' >.amlignore
    run_flow 0 compile --env prod --from-nodes eval.report -o p2.yml
    equals "$ERR" "" "stderr"
    py_yaml p2.yml 'print(d["jobs"]["eval_report"]["inputs"]["m"])' >t.txt
    contains "$(cat t.txt)" "{'type': 'uri_folder', 'path': 'data/model', 'mode': 'ro_mount'}"
    # a memory dataset a command wrote in that run: its file in flow's data
    run_flow 0 compile --env prod --nodes train -o p3.yml
    check_yaml p3.yml --steps train
    py_yaml p3.yml 'print(d["jobs"]["train"]["inputs"]["feats"]["path"])' >t.txt
    contains "$(cat t.txt)" ".flow/data/"
    run_flow 2 compile --env prod --nodes nope
    contains "$ERR" "no step named 'nope'"
}

test_lua_steps_run_flow_in_their_job() {
    compile_project
    write pipeline.lua <<'L'
local function seed(n) return n end
return pipeline{
  node{ func = seed, inputs = "params:epochs", outputs = "s", name = "seed" },
}
L
    run_flow 2 compile --env prod
    contains "$ERR" "step 'seed' (pipeline.lua:3)"
    contains "$ERR" "is not marked as having flow installed"
    cat >>conf/prod/azureml.yml <<'Y'
Y
    sed -i 's/^environment: .*/environment: {name: "flow-env@latest", flow_installed: true}/' conf/prod/azureml.yml
    run_flow 0 compile --env prod --params lr=0.5
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    py_yaml p.yml 'j = d["jobs"]["seed"]; print(j["command"], j["environment"], j["environment_variables"])' >t.txt
    contains "$(cat t.txt)" "flow run pipeline.lua --nodes seed --env=prod --params=lr=0.5 azureml:flow-env@latest"
    contains "$(cat t.txt)" "'FLOW_IN_AZUREML_JOB': '1'"
    # a Lua step that reads a dataset cannot: it receives parameters only
    write pipeline.lua <<'L'
local function seed(n) return n end
local function use(s) return s end
return pipeline{
  node{ func = seed, inputs = "params:epochs", outputs = "s", name = "seed" },
  node{ func = use, inputs = "s", outputs = "u", name = "use" },
}
L
    run_flow 2 compile --env prod
    contains "$ERR" "step 'use' (pipeline.lua:5) is a Lua function on Azure ML but reads 's'"
}

test_datastore_entries_tensorflow_and_mpi() {
    compile_project
    write conf/prod/catalog.yml <<'Y'
raw: {type: file, path: "azureml://datastores/lake/paths/raw/data.csv"}
Y
    write pipeline.lua <<'L'
local tf = distributed_job{ framework = "tensorflow", num_nodes = 2, processes_per_node = 3 }(
  flow.command{ "train", "${inputs.raw}", "${outputs.out}" })
local mpi = distributed_job{ framework = "mpi", num_nodes = 3, processes_per_node = 4 }(
  flow.command{ "mpi-train", "${inputs.x}", "${outputs.y}" })
return pipeline{
  node{ func = tf, inputs = { raw = "raw" }, outputs = { out = "tf_out" }, name = "tf", timeout = 90.5 },
  node{ func = mpi, inputs = { x = "tf_out" }, outputs = { y = "mpi_out" }, name = "mpi" },
}
L
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    py_yaml p.yml 'j = d["jobs"]["tf"]; print(j["inputs"]["raw"], j["distribution"], j["limits"])' >t.txt
    contains "$(cat t.txt)" "{'type': 'uri_file', 'path': 'azureml://datastores/lake/paths/raw/data.csv', 'mode': 'ro_mount'}"
    contains "$(cat t.txt)" "{'type': 'tensorflow', 'worker_count': 6} {'timeout': 91}"
    py_yaml p.yml 'j = d["jobs"]["mpi"]; print(j["distribution"], j["resources"])' >t.txt
    contains "$(cat t.txt)" "{'type': 'mpi', 'process_count_per_instance': 4} {'instance_count': 3}"
}

test_commands_round_trip_through_yaml_exactly() {
    compile_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = [[printf '%s\n' "a: b # c" 'yes' "{x}" '"q"' "tab	end" > ${outputs.o}]], outputs = { o = "o" },
        name = "quoting" },
  node{ command = "true", name = "null" },
  node{ command = "echo 1", name = "2x" },
  node{ command = "echo 2", name = "a.b" },
  node{ command = "echo 3", name = "a_b" },
}
L
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    py_yaml p.yml 'print(d["jobs"]["quoting"]["command"])' >t.txt
    contains "$(cat t.txt)" "printf '%s\n' \"a: b # c\" 'yes' \"{x}\" '\"q\"' \"tab	end\" > '\${{outputs.o}}'"
    # job keys are identifiers and never clash; "null" stays a string
    py_yaml p.yml 'print(sorted(d["jobs"]), [d["jobs"][k]["display_name"] for k in sorted(d["jobs"])])' >t.txt
    contains "$(cat t.txt)" "['_2x', 'a_b', 'a_b_2', 'null', 'quoting'] ['2x', 'a.b', 'a_b', 'null', 'quoting']"
}

test_errors_name_the_problem() {
    compile_project
    run_flow 2 compile
    contains "$ERR" "environment 'local' has no azureml.yml (conf/local/azureml.yml)"
    sed -i 's/^environment: .*/environment: "not an environment"/' conf/prod/azureml.yml
    run_flow 2 compile --env prod
    contains "$ERR" 'environment "not an environment" is not one Azure ML knows'
    run_flow 2 compile --env prod --format dot
    contains "$ERR" "unknown option '--format' for 'flow compile'"
    run_flow 2 compile --env prod -o ''
    contains "$ERR" "--output needs a file name"
    run_flow 0 compile --help
    contains "$OUT" "usage: flow compile [SCRIPT] --env ENV [-o FILE] [options]"
}

# A Lua value an earlier run kept, read by a selected command step: written
# as the command would get it (.flow/data/<name>.json) and uploaded from there.
test_a_kept_lua_value_becomes_a_file_input() {
    compile_project
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return { rows = { 1, 2, 3 } } end, outputs = "table", name = "make" },
  node{ command = "python3 -c 'print(1)' ${inputs.t} > ${outputs.o}", inputs = { t = "table" }, outputs = { o = "out" },
        name = "use" },
}
L
    run_flow 2 compile --env prod --nodes use
    contains "$ERR" "'table' (memory dataset), needed by 'use'"
    run_flow 0 run -q
    run_flow 0 compile --env prod --nodes use -o p.yml
    check_yaml p.yml --steps use
    py_yaml p.yml 'print(d["jobs"]["use"]["inputs"]["t"])' >t.txt
    contains "$(cat t.txt)" "{'type': 'uri_file', 'path': '.flow/data/table.json', 'mode': 'ro_mount'}"
    equals "$(python3 -c 'import json; print(json.load(open(".flow/data/table.json")))')" "{'rows': [1, 2, 3]}" "the file"
}

# A large Lua value the last run did not keep (only steps read it) cannot
# be bound for a selection without its producer: a clear error, not a
# binding to a job the pipeline does not have.
test_a_lua_value_not_kept_is_an_error_naming_the_fix() {
    compile_project
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() local t = {} for i = 1, 300 do t[i] = i end return t end, outputs = "table", name = "make" },
  node{ command = "python3 -c 'print(1)' ${inputs.t} > ${outputs.o}", inputs = { t = "table" }, outputs = { o = "out" },
        name = "use" },
}
L
    run_flow 0 run -q
    run_flow 2 compile --env prod --nodes use -o p.yml
    contains "$ERR" "step 'use' (pipeline.lua:3): reads 'table', a memory value the last run did not keep (a large value only steps read): compile its producer with it (widen the selection), or give 'table' a catalog entry"
    [ ! -e p.yml ] || { echo "a pipeline was written"; return 1; }
}

# ${outputs.metrics} is a JSON file on Azure ML too (a memory dataset would be a folder).
test_metrics_output_is_a_file() {
    compile_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo '{\"loss\": 1}' > ${outputs.metrics}; echo > ${outputs.other}",
        outputs = { metrics = "train_metrics", other = "other" }, name = "train" },
}
L
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    py_yaml p.yml 'o = d["jobs"]["train"]["outputs"]; print(o["metrics"]["type"], o["metrics"]["path"], o["other"]["type"])' >t.txt
    contains "$(cat t.txt)" 'uri_file azureml://datastores/workspaceblobstore/paths/flow/'
    contains "$(cat t.txt)" '/runs/${{name}}/metrics/metrics.json uri_folder'
}

test_input_and_output_names_are_identifiers() {
    compile_project
    write conf/base/catalog.yml <<'Y'
train-set: {type: file, path: data/raw.csv}
Y
    write pipeline.lua <<'L'
local clean = pipeline{
  node{ command = "cat ${inputs.train-set} > ${outputs.clean}", inputs = "train-set", outputs = "clean",
        name = "prep" },
}
return pipeline{
  pipeline{ clean, namespace = "ns", inputs = { "train-set" } },
  node{ command = "cat ${inputs.ns.clean} ${inputs.train-set} > ${outputs.2out}", inputs = { "ns.clean", "train-set" },
        outputs = "2out", name = "use" },
  node{ command = "cat ${inputs.train-set} > ${outputs.twice}", inputs = { "train-set", "train-set" },
        outputs = "twice", name = "dup" },
}
L
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    # a list-form dataset's name made an identifier, in the key and in the command alike
    py_yaml p.yml 'j = d["jobs"]["use"]; print(sorted(j["inputs"]), sorted(j["outputs"]), j["command"])' >t.txt
    contains "$(cat t.txt)" "['ns_clean', 'train_set'] ['_2out']"
    contains "$(cat t.txt)" "cat '\${{inputs.ns_clean}}' '\${{inputs.train_set}}' > '\${{outputs._2out}}'"
    contains "$OUT" 'ns_clean: "${{parent.jobs.ns_prep.outputs.clean}}"'
    # one dataset read twice: two inputs, one name each
    py_yaml p.yml 'j = d["jobs"]["dup"]; print(sorted(j["inputs"]))' >t.txt
    contains "$(cat t.txt)" "['train_set', 'train_set_2']"
}

# az ml takes a pipeline node's name in lower case only (azure-ai-ml's
# test_pipeline_node_name_validate refuses "Abc" and "aBc"): a step named
# Prepare is the job key prepare, its display_name Prepare; two names that
# differ in case only get keys of their own.
test_job_keys_are_lower_case() {
    compile_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo x > ${outputs.feats}", outputs = "feats", name = "Prepare" },
  node{ command = "cat ${inputs.feats} > ${outputs.m}", inputs = "feats", outputs = "m", name = "trainModel" },
  node{ command = "echo y > ${outputs.z}", outputs = "z", name = "prepare" },
}
L
    run_flow 0 compile --env prod
    printf '%s\n' "$OUT" >p.yml
    check_yaml p.yml
    py_yaml p.yml 'print(sorted(d["jobs"]), d["jobs"]["prepare"]["display_name"], d["jobs"]["trainmodel"]["display_name"])' >t.txt
    contains "$(cat t.txt)" "['prepare', 'prepare_2', 'trainmodel'] Prepare trainModel"
    contains "$OUT" 'feats: "${{parent.jobs.prepare.outputs.feats}}"'
}

test_lua_steps_keep_the_pipeline_and_conf() {
    compile_project
    sed -i 's/^environment: .*/environment: {name: "flow-env@latest", flow_installed: true}/' conf/prod/azureml.yml
    cp -r conf conf2
    write pipeline.lua <<'L'
local function seed(n) return n end
flow.register("training", pipeline{ node{ func = seed, inputs = "params:epochs", outputs = "s", name = "only_in_training" } })
return pipeline{ node{ func = seed, inputs = "params:epochs", outputs = "t", name = "other" } }
L
    run_flow 0 compile --env prod --pipeline training --conf conf2
    printf '%s\n' "$OUT" >p.yml
    py_yaml p.yml 'print(d["jobs"]["only_in_training"]["command"])' >t.txt
    contains "$(cat t.txt)" "flow run pipeline.lua --nodes only_in_training --pipeline=training --env=prod --conf=conf2"
    # the command runs, as the job would: that step of that pipeline, with that configuration
    rm -rf conf
    FLOW_IN_AZUREML_JOB=1 run_flow 0 run pipeline.lua --nodes only_in_training --pipeline=training --env=prod --conf=conf2
}
