# t_config.sh — parameters per environment: conf/base + conf/<env>, --params,
# interpolation, flow config / --explain, credentials never shown.

project() {
    write conf/base/parameters.yml <<'Y'
model:
  lr: 0.01
  layers: [64, 32]
  name: base-model
epochs: 10
num_training_nodes: 1
data_root: "s3://${globals:bucket}/data"
Y
    write conf/base/globals.yml <<'Y'
bucket: shared-bucket
Y
    write conf/local/parameters.yml <<'Y'
epochs: 2
Y
    write conf/prod/parameters.yml <<'Y'
model:
  lr: 0.001
  layers: [256]
num_training_nodes: 4
Y
    write conf/local/credentials.yml <<'Y'
azure_sp:
  client_secret: "s3cr3t-VALUE-123"
Y
    write pipeline.lua <<'L'
local flow = require("flow")
local train = distributed_job{ framework = "pytorch", num_nodes = "params:num_training_nodes" }(
  function(model, epochs, root)
    print(string.format("lr=%s layers=%d name=%s epochs=%s root=%s", model.lr, #model.layers,
                        model.name, epochs, root))
    return 1
  end)
return pipeline{
  node{ func = train, inputs = { "params:model", "params:epochs", "params:data_root" }, outputs = "m",
        name = "train" },
  node{ command = { "echo", "cmd epochs=${params.epochs} lr=${params.model.lr}" }, name = "cmd" },
}
L
}

test_default_env_is_local() {
    project
    run_flow 0 run -v
    contains "$OUT" "lr=0.01 layers=2 name=base-model epochs=2 root=s3://shared-bucket/data"
    contains "$ERR" "cmd epochs=2 lr=0.01"
}

test_prod_overlay_merges_deeply() {
    project
    run_flow 0 run --env prod
    # prod replaces lr and the list, keeps the name from base, and has no local overlay
    contains "$OUT" "lr=0.001 layers=1 name=base-model epochs=10"
}

test_flow_env_variable() {
    project
    FLOW_ENV=prod run_flow 0 run
    contains "$OUT" "lr=0.001"
    FLOW_ENV=prod run_flow 0 run --env local     # --env wins
    contains "$OUT" "lr=0.01"
}

test_params_override_with_types() {
    project
    run_flow 0 run --env prod --params 'model.lr=0.5,epochs=7,model.name="quoted, name"'
    contains "$OUT" "lr=0.5 layers=1 name=quoted, name epochs=7"
    run_flow 0 config --params 'x.flag=true,z=null,w=[1,2],v=1e3,s=007x'
    contains "$OUT" "flag: true"
    contains "$OUT" "z: null"
    contains "$OUT" "v: 1000"
}

test_params_keep_every_digit_in_commands_and_env() {
    write conf/base/parameters.yml <<'Y'
big: 1234567890123456789
lr: 0.1
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo cmd lr=${params.lr} big=${params.big} n=${params.n} env=$LR", env = { LR = "${params.lr}" },
        name = "cmd" },
  node{ func = function(b) print("big " .. math.type(b) .. " " .. b) end, inputs = "params:big", name = "show" },
}
L
    run_flow 0 run -v --params 'lr=0.3333333333333333,n=12345678901234567'
    contains "$ERR" "cmd lr=0.3333333333333333 big=1234567890123456789 n=12345678901234567 env=0.3333333333333333"
    contains "$OUT" "big integer 1234567890123456789"
    run_flow 0 config parameters.big
    contains "$OUT" "1234567890123456789"
    # one formatter: a float that needs 16 digits reads the same in
    # `flow config` and a command (it was 17 digits in config)
    write conf/base/parameters.yml <<'Y'
big: 1
lr: 0.7999999999999999
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo cmd lr=${params.lr}", name = "cmd" },
}
L
    run_flow 0 run -v
    contains "$ERR" "cmd lr=0.7999999999999999"
    run_flow 0 config parameters
    contains "$OUT" "lr: 0.7999999999999999"
}

test_num_nodes_resolved_per_env() {
    project
    run_flow 0 list
    contains "$OUT" "PyTorch 1 node x 1 process"
    run_flow 0 list --env prod
    contains "$OUT" "PyTorch 4 nodes x 1 process"
    run_flow 2 list --params num_training_nodes=0
    contains "$ERR" "num_nodes = \"params:num_training_nodes\" is 0 in environment 'local' (set in --params); it must be a whole number from 1 to 10000"
    run_flow 2 list --params num_training_nodes=two
    contains "$ERR" "is \"two\" in environment 'local'"
}

test_list_indexes_read_the_same_in_config_commands_and_inputs() {
    project
    write conf/base/parameters.yml <<'Y'
stages:
  - { size: 3 }
  - { size: 5 }
"v1.2": dotted-key
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "echo", "cmd first=${params.stages.0.size} second=${params.stages.1.size} ${params.v1.2}" },
        name = "cmd" },
  node{ func = function(s, k) print("lua second=" .. s .. " " .. k) end,
        inputs = { "params:stages.1.size", "params:v1.2" }, name = "lua" },
}
L
    run_flow 0 config stages.0.size
    equals "$OUT" "3"
    run_flow 0 run -v
    contains "$ERR" "cmd first=3 second=5 dotted-key"
    contains "$OUT" "lua second=5 dotted-key"
    sed -i 's/size: 3/size: 4/' conf/base/parameters.yml
    run_flow 0 run --explain
    contains "$ERR" "explain: cmd runs: parameter 'stages.0.size' changed"
    contains "$ERR" "explain: lua is up to date"
    sed -i 's/stages.1.size}/stages.2.size}/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "reads parameter 'stages.2.size', which is not defined"
}

test_unknown_env_lists_existing() {
    project
    run_flow 2 run --env staging
    contains "$ERR" "staging"
    contains "$ERR" "local"
    contains "$ERR" "prod"
}

test_missing_parameter_names_step_and_closest_key() {
    project
    sed -i 's/"params:epochs"/"params:epoch"/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "step 'train'"
    contains "$ERR" "reads parameter 'epoch'"
    contains "$ERR" "did you mean 'epochs'?"
}

test_yaml_error_has_file_line_column() {
    project
    write conf/prod/parameters.yml <<'Y'
model:
  lr: 0.1
   layers: [1
Y
    run_flow 2 run --env prod
    contains "$ERR" "conf/prod/parameters.yml:3:"
    not_contains "$OUT" "lr="
}

# A bad `<<` is reported at its own line, not where its mapping ends.
test_bad_merge_key_names_its_line() {
    project
    printf 'min_count: 2\n<<: 5\na: 1\nb: 2\nc: 3\n' >conf/local/parameters.yml
    run_flow 2 run
    contains "$ERR" "conf/local/parameters.yml:2: \`<<\` merges a mapping or a list of mappings"
}

# A config file that is a dangling link, a device or a FIFO stops the run
# naming the file and what it is, instead of being skipped (then a parameter
# it defines was "not defined", the file never named).  A FIFO is not opened:
# the loader does not wait for a writer (timeout: a hang fails the test).
test_config_file_that_is_not_a_file_is_named() {
    project
    printf '#!/bin/sh\nexec timeout 20 "%s" "$@"\n' "$FLOW" >flow_with_timeout
    chmod +x flow_with_timeout
    local p=conf/base/parameters.yml
    rm $p
    ln -s ../shared/parameters.yml $p
    run_flow 2 run
    contains "$ERR" "$p: a symbolic link to '../shared/parameters.yml', which does not exist"
    not_contains "$ERR" "reads parameter"
    rm $p
    ln -s /dev/zero $p
    run_flow 2 run
    contains "$ERR" "$p: not a regular file: a symbolic link to '/dev/zero', which is a character device"
    rm $p
    mkfifo $p
    FLOW=$PWD/flow_with_timeout run_flow 2 run
    contains "$ERR" "$p: not a regular file but a FIFO"
    FLOW=$PWD/flow_with_timeout run_flow 2 config --env prod
    contains "$ERR" "$p: not a regular file but a FIFO"
}

test_duplicate_key_in_one_env_names_both_files() {
    project
    write conf/base/parameters_extra.yml <<'Y'
epochs: 3
Y
    run_flow 2 run
    contains "$ERR" "parameters.yml"
    contains "$ERR" "parameters_extra.yml"
}

test_env_interpolation() {
    project
    write conf/base/parameters.yml <<'Y'
home: "${env:FLOW_TEST_HOME}/x"
fallback: ${env:FLOW_TEST_UNSET_VAR,dflt}
epochs: 1
model: { lr: 1, layers: [1], name: n }
num_training_nodes: 1
data_root: r
Y
    FLOW_TEST_HOME=/h run_flow 0 config
    contains "$OUT" "home: /h/x"
    contains "$OUT" "fallback: dflt"
    run_flow 2 config
    contains "$ERR" "FLOW_TEST_HOME"
    contains "$ERR" "conf/base/parameters.yml:1"
}

test_config_dump_and_key() {
    project
    run_flow 0 config --env prod
    contains "$OUT" "lr: 0.001"
    contains "$OUT" "bucket: shared-bucket"
    run_flow 0 config model.layers --env prod
    contains "$OUT" "256"
    not_contains "$OUT" "lr:"
    run_flow 2 config model.lrr
    contains "$ERR" "did you mean 'model.lr'?"
}

test_config_alias_of_an_anchor_set_on_a_merge_value() {
    write conf/base/parameters.yml <<'Y'
a: {<<: &base {x: 1}}
b: *base
Y
    run_flow 0 config b
    no_crash
    contains "$OUT" "x: 1"
}

test_unknown_flow_yml_setting_is_an_error() {
    project
    write conf/base/flow.yml <<'Y'
# engine settings
distributd: local
Y
    run_flow 2 run
    contains "$ERR" "conf/base/flow.yml:2: unknown flow setting 'distributd' (did you mean 'distributed'?)"
    run_flow 2 config
    contains "$ERR" "conf/base/flow.yml:2: unknown flow setting 'distributd'"
}

test_config_explain() {
    project
    run_flow 0 config --env prod --explain model.lr
    contains "$OUT" "conf/base/parameters.yml:2"
    contains "$OUT" "conf/prod/parameters.yml:2"
    run_flow 0 config --env prod --params model.lr=9 --explain model.lr
    contains "$OUT" "--params"
}

test_credentials_masked_in_config() {
    project
    run_flow 0 config
    contains "$OUT" "client_secret"
    not_contains "$OUT" "s3cr3t-VALUE-123"
    run_flow 0 config credentials.azure_sp.client_secret
    not_contains "$OUT" "s3cr3t-VALUE-123"
}

test_secret_never_in_error_messages() {
    project
    # A step whose error message would carry the secret: it is masked.
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() error("login failed with s3cr3t-VALUE-123") end,
                       outputs = "x", name = "login" } }
L
    run_flow 1 run
    contains "$ERR" "login failed with ***"
    not_contains "$ERR" "s3cr3t-VALUE-123"
    # A command failing with the secret on its stderr: the tail shown is masked too.
    write pipeline.lua <<'L'
return pipeline{ node{ command = { "sh", "-c", "echo token=s3cr3t-VALUE-123 >&2; exit 1" }, name = "leaky" } }
L
    run_flow 1 run
    not_contains "$ERR" "s3cr3t-VALUE-123"
}

test_secret_redacted_in_verbose_output_and_logs() {
    project
    # The secret in one write, split across two writes, on stderr, in the
    # command line flow logs itself, and in a Lua step's print.
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo login bob:s3cr3t-VALUE-123; printf 'split s3cr3t-VA'; sleep 0.3; "
                  .. "printf 'LUE-123 end\\n'; echo err=s3cr3t-VALUE-123 >&2", name = "leaky" },
  node{ func = function() print("lua says s3cr3t-VALUE-123") return 1 end, outputs = "x", name = "talker" },
}
L
    run_flow 0 run -v
    not_contains "$ERR$OUT" "s3cr3t-VALUE-123" "terminal output"
    contains "$ERR" "[leaky] login bob:***"
    contains "$ERR" "[leaky] split *** end"
    contains "$ERR" "[leaky] err=***"
    contains "$OUT" "lua says ***"
    logs=$(cat .flow/runs/latest/logs/*.log)
    not_contains "$logs" "s3cr3t-VALUE-123" "step logs"
    contains "$logs" "login bob:***"
    contains "$logs" "split *** end"
    contains "$logs" "lua says ***"
    contains "$logs" '$ echo login bob:***;'
}

test_conf_dir_option() {
    project
    mv conf settings
    run_flow 0 run --conf settings --env prod
    contains "$OUT" "lr=0.001"
    run_flow 2 run --conf nowhere
    contains "$ERR" "--conf nowhere: no such directory"
    run_flow 2 config --conf settings/base        # an environment's, not the one above them
    contains "$ERR" "--conf settings/base: it holds config files (globals.yml) but no base/ directory"
    # a relative DIR is from where flow was started, though flow works in
    # the script's directory: settings/ beside proj/, and proj/settings
    mkdir proj && cp pipeline.lua proj/
    run_flow 0 run proj/pipeline.lua --conf settings --env prod
    contains "$OUT" "lr=0.001"
    mv settings proj/
    run_flow 0 run proj/pipeline.lua --conf proj/settings --env prod --force
    contains "$OUT" "lr=0.001"
}

test_flow_run_params_from_lua() {
    project
    write driver.lua <<'L'
local flow = require("flow")
local p = pipeline{ node{ func = function(lr, e) print("lr=" .. lr .. " epochs=" .. e) return 1 end,
                          inputs = { "params:model.lr", "params:epochs" }, outputs = "x", name = "show" } }
flow.run(p, { params = { model = { lr = 0.3 } } })
flow.run(p, { env = "prod" })
L
    run_flow 0 run driver.lua
    contains "$OUT" "lr=0.3 epochs=2"
    contains "$OUT" "lr=0.001 epochs=10"
}

test_pytorch_example_lists_four_nodes_in_prod() {
    copy_example pytorch_ddp ex
    run_flow 0 list ex
    contains "$OUT" "PyTorch 1 node x 2 processes"
    run_flow 0 list ex --env prod
    contains "$OUT" "PyTorch 4 nodes x 2 processes"
}

# Embedded in a longer string, an environment variable gives its text as written (typing it
# first made 0042 "42", 1.10 "1.1", 0x1F "31" and NULL nothing); a whole ${env:VAR} is
# typed.  A quoted default may hold '}'.
test_env_embedded_in_a_string_keeps_its_text() {
    write conf/base/parameters.yml <<'Y'
path: "/data/${env:ID}/x"
ver: "v${env:VER}"
hex: "id-${env:HEX}"
nulls: "n-${env:NUL}-${env:TIL}"
id: ${env:ID}
brace: "${env:UNSET_FLOW_VAR,'x}y'}"
Y
    export ID=0042 VER=1.10 HEX=0x1F NUL=NULL TIL='~'
    unset UNSET_FLOW_VAR
    run_flow 0 config
    contains "$OUT" "path: /data/0042/x"
    contains "$OUT" "ver: v1.10"
    contains "$OUT" "hex: id-0x1F"
    contains "$OUT" "nulls: n-NULL-~"
    contains "$OUT" "id: 42"
    contains "$OUT" "brace: x}y"
}

# A config file in a subdirectory that is no section, whose own name picks no section,
# is ignored with a warning naming it (it used to vanish without one).
test_config_file_in_a_plain_subdirectory_warns() {
    write conf/base/parameters.yml <<'Y'
lr: 0.1
Y
    write conf/prod/overrides/model.yml <<'Y'
lr: 0.5
Y
    run_flow 0 config lr --env prod
    equals "$OUT" "0.1"
    contains "$ERR" "conf/prod/overrides/model.yml: ignored"
    write conf/base/parameters/a/b/c/d/e/f/g/h/deep.yml <<'Y'
deep: 1
Y
    run_flow 2 config deep
    contains "$ERR" "conf/base/parameters/a/b/c/d/e/f/g/h: ignored: directories more than 8 deep"
}

# A parameter set to null exists: a step reading it is told so, with where it was set,
# never "not defined (did you mean 'seed'?)".
test_step_reading_a_null_parameter() {
    write conf/base/parameters.yml <<'Y'
epochs: 2
seed: null
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(s) print(s) end, inputs = "params:seed", name = "lua" },
  node{ command = { "echo", "${params.seed}" }, name = "cmd" },
}
L
    run_flow 0 config seed
    equals "$OUT" "null"
    run_flow 2 run
    contains "$ERR" "reads parameter 'seed', which is null in environment 'local' (set at conf/base/parameters.yml:2)"
    not_contains "$ERR" "did you mean"
}
