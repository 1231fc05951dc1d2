# t_azureml.sh — steps dispatched to Azure ML, end to end, against the strict
# test double (tests/aml/double.py: HTTPS on loopback, every body checked
# against Microsoft's schema, jobs with a life cycle, faults on demand).

source "$FLOW_ROOT/tests/aml/double_lib.sh"

# One Azurite for the suite (the code snapshot's blobs go there), stopped
# when the runner exits.
AZURITE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/flow-azurite.XXXXXX")
azurite_start "$AZURITE_DIR" || exit 1
trap 'azurite_stop; rm -rf "$AZURITE_DIR"' EXIT

# The double (beside the project, not in it: its files are no code to
# upload), a credential for it in the environment, and, in the project
# directory ./proj, which becomes the working directory, conf/prod/azureml.yml.
start_aml() {
    aml_double_available || { echo "the AML double needs /usr/bin/python3 with jsonschema and cryptography, openssl and curl (make test-deps)"; return 1; }
    aml_double_start "$PWD/double" --phase-seconds 0.1 --blob-endpoint "$AZURITE_BLOB_ENDPOINT" "$@"
    mkdir -p proj
    cd proj
    # what run_flow writes while flow runs is no code: as a user leaves out a log
    printf 'stdout.txt\nstderr.txt\n' >.amlignore
    export FLOW_CA_BUNDLE=$AML_DOUBLE_CA_FILE AZURE_AUTHORITY_HOST=$AML_DOUBLE_URL
    export AZURE_TENANT_ID=$AML_DOUBLE_TENANT AZURE_CLIENT_ID=$AML_DOUBLE_CLIENT_ID
    export AZURE_CLIENT_SECRET=$AML_DOUBLE_CLIENT_SECRET
    write conf/base/parameters.yml <<'Y'
epochs: 3
Y
    write conf/prod/azureml.yml <<Y
subscription_id: $AML_DOUBLE_SUBSCRIPTION
resource_group: $AML_DOUBLE_RESOURCE_GROUP
workspace: $AML_DOUBLE_WORKSPACE
experiment_name: flow-tests
arm_endpoint: $AML_DOUBLE_URL
compute:
  __default__: cpu-cluster
  gpu: gpu-cluster
environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest
shm_size: 16g
timeout: 2h
poll_interval: 0.2
environment_variables:
  NCCL_DEBUG: INFO
Y
}

# The request log's lines with this op ("jobs.put", "jobs.get", "jobs.cancel").
requests_of() {
    grep -F "\"op\": \"$1\"" "$AML_DOUBLE_REQUESTS_LOG" || true
}

count_of() {
    requests_of "$1" | grep -c . || true
}

# Nothing flow wrote (output, logs, journal, state, run.json) holds a secret.
no_secrets() {
    local tok
    tok=$(aml_token)
    not_contains "$OUT$ERR" "$AML_DOUBLE_CLIENT_SECRET" "flow's output"
    not_contains "$OUT$ERR" "sig=" "flow's output (a SAS signature)"
    local hits
    # (flow's own files: not the data steps wrote, whose random bytes may hold "sig=")
    hits=$(grep -rlF --exclude-dir=data --exclude-dir=datastore --exclude-dir=azureml \
           -e "$AML_DOUBLE_CLIENT_SECRET" -e "$tok" -e "sig=" .flow || true)
    equals "$hits" "" "files under .flow/ holding a secret"
}

train_pipeline() {
    write pipeline.lua <<'L'
local train = distributed_job<framework = "pytorch", nodes = 2, processes_per_node = 4>(
  flow.command{ "python", "train.py", "--epochs", "${params.epochs}", "--out", "${outputs.model}" })
return pipeline{
  node{ func = train, outputs = "model", name = "train", tags = { "gpu" } },
}
L
}

# A job that runs for a minute, under a step's timeout of 1 s.
timed_train_pipeline() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(flow.command{ "python", "train.py" }),
        name = "train", timeout = 1 },
}
L
    aml_ctl POST config '{"phases": {"Running": 60}}' >/dev/null
}

# A training job left running by a detached run that Ctrl-C stopped
# (ARGS: more flags for flow run).
detached_running_job() {
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod --detach "$@"
    wait_for_status Running
    kill -INT "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
}

test_distributed_step_runs_as_an_azureml_job() {
    start_aml
    train_pipeline
    run_flow 0 list --env prod
    contains "$OUT" "azureml gpu-cluster ×2 nodes ×4 proc"
    run_flow 0 run --env prod
    no_crash
    contains "$ERR" "Azure ML job flow-train-"
    contains "$ERR" "https://ml.azure.com/runs/flow-train-"
    body=$(requests_of jobs.put)
    equals "$(printf '%s\n' "$body" | grep -c .)" 1 "PUTs"
    for want in '"jobType": "Command"' '"distributionType": "PyTorch"' '"processCountPerInstance": 4' \
                '"instanceCount": 2' '"shmSize": "16g"' '"timeout": "PT2H"' '"NCCL_DEBUG": "INFO"' \
                '"experimentName": "flow-tests"' '"displayName": "train"' '/computes/gpu-cluster"' \
                '"environmentId": "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest"' \
                '"command": "python train.py --epochs 3 --out ${{outputs.model}}"' \
                '"jobOutputType": "uri_folder"' '"flow.step": "train"'; do
        contains "$body" "$want" "the job's PUT"
    done
    # the job's name was journaled before its PUT
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"event":"remote_job"'
    no_secrets
}

test_verbose_run_shows_requests_but_no_secret() {
    start_aml
    train_pipeline
    run_flow 0 run --env prod -v
    contains "$ERR" "azureml: PUT https://127.0.0.1:"
    contains "$ERR" "x-ms-request-id"
    no_secrets
    # the snapshot went up once, through the SAS, and is reused by a new job
    contains "$(requests_of codes.start_pending_upload)" '"status": 200'
    run_flow 0 run --env prod --force
    equals "$(count_of codes.start_pending_upload)" 1 "pending uploads"
    equals "$(count_of jobs.put)" 2 "PUTs"
}

# Hundreds of jobs at once on the one loop, in the remote pool: -j 1 does
# not bound them, and a local step runs beside them.
test_many_jobs_do_not_hold_local_slots() {
    start_aml
    write pipeline.lua <<'L'
local nodes = { node{ command = "sleep 0.5; echo here > ${outputs.o}", outputs = "o", name = "local" } }
for i = 1, 200 do
  nodes[#nodes + 1] = node{ command = { "python", "train.py", "--seed", tostring(i) }, name = "job" .. i, tags = { "gpu" } }
end
return pipeline(nodes)
L
    sed -i 's/^compute:/dispatch: tagged\ncompute:/' conf/prod/azureml.yml
    start=$(date +%s.%N)
    run_flow 0 run --env prod -j 1
    no_crash
    equals "$(count_of jobs.put)" 200 "PUTs"
    equals "$(cat .flow/data/o)" here "the local step's output"
    # one upload of the snapshot for all of them
    equals "$(count_of codes.start_pending_upload)" 1 "pending uploads"
}

test_rerun_with_nothing_changed_submits_nothing() {
    start_aml
    train_pipeline
    run_flow 0 run --env prod
    puts=$(count_of jobs.put)
    uploads=$(count_of codes.start_pending_upload)
    lookups=$(count_of codes.list)
    run_flow 0 run --env prod
    contains "$OUT$ERR" "up to date"
    equals "$(count_of jobs.put)" "$puts" "PUTs after the rerun"
    equals "$(count_of codes.start_pending_upload)" "$uploads" "uploads after the rerun"
    equals "$(count_of codes.list)" "$lookups" "snapshot lookups after the rerun"
    # a changed parameter submits a new job
    run_flow 0 run --env prod --params epochs=5
    equals "$(count_of jobs.put)" "$((puts + 1))" "PUTs after a change"
}

test_failed_job_fails_the_step_with_status_and_link() {
    start_aml
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "python", "train.py" }, outputs = "m", name = "train", tags = { "gpu" },
        env = { FLOW_DOUBLE_OUTCOME = "Failed" } },
}
L
    sed -i 's/^compute:/dispatch: tagged\ncompute:/' conf/prod/azureml.yml
    run_flow 1 run --env prod
    no_crash
    contains "$ERR" "step 'train'"
    contains "$ERR" "Failed"
    contains "$ERR" "https://ml.azure.com/runs/flow-train-"
}

test_bad_azureml_settings_name_file_and_line() {
    start_aml
    train_pipeline
    echo "compute_target: x" >>conf/prod/azureml.yml
    run_flow 2 run --env prod
    contains "$ERR" "conf/prod/azureml.yml:"
    contains "$ERR" "unknown azureml setting 'compute_target'"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

test_throttling_and_dropped_connections_are_survived() {
    start_aml
    train_pipeline
    aml_ctl POST faults '{"match": {"method": "PUT", "path_regex": "/jobs/"}, "action": "status", "status": 429, "retry_after": 1, "count": 2}' >/dev/null
    aml_ctl POST faults '{"match": {"method": "GET", "path_regex": "/jobs/"}, "action": "drop", "count": 2}' >/dev/null
    aml_ctl POST faults '{"match": {"method": "GET", "path_regex": "/jobs/"}, "action": "status", "status": 503, "count": 1}' >/dev/null
    run_flow 0 run --env prod
    no_crash
    equals "$(requests_of jobs.put | grep -c '"status": 201')" 1 "jobs created"
}

test_expired_token_is_refreshed() {
    start_aml --token-lifetime 3599
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 1.5}}' >/dev/null
    run_flow_bg run --env prod
    wait_for_status Running
    aml_ctl POST expire_tokens >/dev/null
    wait "$FLOW_PID" || { cat stderr.txt; return 1; }
    tokens=$(aml_ctl GET stats | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["tokens_issued"])')
    [ "$tokens" -ge 2 ] || { echo "expected a second token, got $tokens"; return 1; }
}

# flow in the background, output in stdout.txt/stderr.txt.
# Waits until a job is in this status now (the newest job, when there are several).
wait_for_status() {
    local i now
    for i in $(seq 200); do
        now=$(aml_ctl GET jobs | /usr/bin/python3 -c 'import json, sys
jobs = json.load(sys.stdin)
jobs = jobs if isinstance(jobs, list) else jobs.get("jobs", jobs.get("value", []))
print(jobs[-1]["status"] if jobs else "")' 2>/dev/null || true)
        [ "$now" = "$1" ] && return 0
        sleep 0.05
    done
    echo "no job reached $1"; aml_ctl GET jobs; return 1
}

test_ctrl_c_cancels_the_job() {
    start_aml
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod
    wait_for_status Running
    kill -INT "$FLOW_PID"
    set +e; wait "$FLOW_PID"; code=$?; set -e
    equals "$code" 130 "exit status"
    equals "$(count_of jobs.cancel)" 1 "cancel requests"
    aml_ctl GET jobs | grep -q '"status": "Canceled"' || { echo "the job is not Canceled"; aml_ctl GET jobs; return 1; }
}

test_detach_then_resume_waits_without_a_second_job() {
    start_aml
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod --detach
    wait_for_status Running
    kill -INT "$FLOW_PID"
    set +e; wait "$FLOW_PID"; code=$?; set -e
    equals "$code" 130 "exit status"
    equals "$(count_of jobs.cancel)" 0 "cancel requests"
    contains "$(cat stderr.txt)" "left running"
    aml_ctl POST config '{"phases": {"Running": 0.1}}' >/dev/null
    run_flow 0 run --resume
    equals "$(count_of jobs.put)" 1 "PUTs"
}

test_killed_run_resumes_without_a_second_job() {
    start_aml
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod
    wait_for_status Running
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    aml_ctl POST config '{"phases": {"Running": 0.1}}' >/dev/null
    run_flow 0 run --resume
    equals "$(count_of jobs.put)" 1 "PUTs"
}

# A resumed run whose look at the adopted job fails (a 403, or 5xx past the
# retries) cannot tell whether it runs: the step fails naming the job and
# how to reach it, and no second job is submitted (it was: a failed look was
# taken for "no such job", and the running job was lost to flow cancel).
test_a_failed_look_at_an_adopted_job_submits_no_second_job() {
    start_aml
    detached_running_job
    aml_ctl POST faults '{"match": {"method": "GET", "path_regex": "/jobs/flow-"}, "action": "status", "status": 403, "count": 1}' >/dev/null
    run_flow 1 run --resume
    contains "$ERR" "could not be read"
    contains "$ERR" "it may still be running: \`flow run --resume"
    equals "$(count_of jobs.put)" 1 "PUTs"
    run_flow 0 cancel
    contains "$ERR" "is Canceled"
}

# A cancel Azure ML refuses (a role without the cancel action) is said, with
# how to reach the job left running, not hidden behind "interrupted" or
# "asked to cancel".
test_a_refused_cancel_is_said() {
    start_aml
    timed_train_pipeline
    aml_ctl POST faults '{"match": {"method": "POST", "path_regex": "/cancel"}, "action": "status", "status": 403, "count": null, "code": "AuthorizationFailed"}' >/dev/null
    run_flow 1 run --env prod
    contains "$ERR" "step 'train' timed out after 1s (Azure ML job flow-train-"
    contains "$ERR" "could not be cancelled"
    contains "$ERR" "it may still be running"
}

# Ctrl-C while a request waits out a Retry-After: the PUT's back-off is left
# (nothing of it is on the wire), and a poll's is left for the cancel; flow
# waited out every back-off first (minutes) and survived SIGTERM meanwhile.
test_ctrl_c_during_a_retry_after_stops_at_once() {
    start_aml
    train_pipeline
    aml_ctl POST faults '{"match": {"method": "PUT", "path_regex": "/jobs/"}, "action": "status", "status": 503, "retry_after": 100, "count": 5}' >/dev/null
    run_flow_bg run --env prod
    for _ in $(seq 100); do [ "$(count_of jobs.put)" -ge 1 ] && break; sleep 0.05; done
    sleep 0.3
    interrupt_within "$FLOW_PID" 10 "flow's wait for the Retry-After"
    equals "$STATUS" 130 "exit status"
}

# One answer that is no job (a proxy's HTML page, HTTP 200) to the PUT or to
# a poll: the job is read again.  The step failed at once with its job left
# running on Azure ML.
test_an_answer_that_is_no_job_is_read_again() {
    start_aml
    train_pipeline
    aml_ctl POST faults '{"match": {"method": "PUT", "path_regex": "/jobs/"}, "action": "html_after", "count": 1}' >/dev/null
    aml_ctl POST faults '{"match": {"method": "GET", "path_regex": "/jobs/"}, "action": "html_after", "count": 1}' >/dev/null
    run_flow 0 run --env prod
    equals "$(count_of jobs.put)" 1 "PUTs"
}

# A resumed run that adopts the job journals it too: killed again, its own
# --resume submitted a second job, and `flow cancel` of it found none.
test_a_resumed_run_killed_again_resumes_without_a_second_job() {
    start_aml
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod
    wait_for_status Running
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow_bg run --resume
    for _ in $(seq 100); do grep -q '"adopted":true' .flow/runs/latest/journal.jsonl 2>/dev/null && break; sleep 0.05; done
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 cancel
    contains "$ERR" "is Canceled"
    equals "$(count_of jobs.put)" 1 "PUTs"
}

test_flow_cancel_cancels_a_detached_run() {
    start_aml
    detached_running_job
    run_flow 0 cancel
    contains "$ERR" "is Canceled"
    equals "$(count_of jobs.cancel)" 1 "cancel requests"
}

# flow cancel and flow status use the configuration the run was started
# with (its --conf and --params, from its journal): with --conf, both said
# there was no conf/ directory, and the detached job could not be reached.
test_cancel_and_status_use_the_runs_conf() {
    start_aml
    mv conf settings
    detached_running_job --conf settings
    run_flow 0 status
    contains "$OUT" "Running"
    run_flow 0 cancel
    contains "$ERR" "is Canceled"
    equals "$(count_of jobs.cancel)" 1 "cancel requests"
}

test_whoami_names_the_credential_without_secrets() {
    start_aml
    run_flow 0 azureml whoami --env prod
    contains "$OUT" "client secret"
    contains "$OUT" "$AML_DOUBLE_CLIENT_ID"
    contains "$OUT" "token:"
    not_contains "$OUT$ERR" "$AML_DOUBLE_CLIENT_SECRET"
    AZURE_CLIENT_SECRET=wrong-secret run_flow 1 azureml whoami --env prod
    contains "$ERR" "invalid_client"
    not_contains "$OUT$ERR" "wrong-secret"
}

test_lua_step_needs_an_environment_with_flow() {
    start_aml
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(function() return 1 end), outputs = "m", name = "fit" },
}
L
    run_flow 2 run --env prod
    contains "$ERR" "step 'fit' (pipeline.lua:2)"
    contains "$ERR" "flow_installed: true"
    contains "$ERR" "examples/pytorch_ddp/azureml/Dockerfile"
}

# A Lua function step runs inside its job as `flow run --nodes`, which
# receives parameters only: reading a dataset there, or reading here what
# it makes there, is refused before anything runs (command steps move data:
# t_hybrid.sh).
test_lua_step_on_azureml_reading_data_is_refused_before_anything_runs() {
    start_aml
    sed -i 's/^environment:.*/environment: {name: "flow-runtime:2", flow_installed: true}/' conf/prod/azureml.yml
    sed -i 's/^compute:/dispatch: tagged\ncompute:/' conf/prod/azureml.yml
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "x", name = "make" },
  node{ func = function(x) return x + 1 end, inputs = "x", outputs = "y", name = "train", tags = { "gpu" } },
}
L
    run_flow 2 run --env prod
    contains "$ERR" "step 'train' (pipeline.lua:3) is a Lua function on Azure ML but reads 'x'"
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "x", name = "make", tags = { "gpu" } },
  node{ func = function(x) return x + 1 end, inputs = "x", outputs = "y", name = "here" },
}
L
    run_flow 2 run --env prod
    contains "$ERR" "step 'here' (pipeline.lua:3) reads 'x', which Lua step 'make' makes inside an Azure ML job"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

test_status_logs_and_run_json_show_the_job() {
    start_aml
    train_pipeline
    run_flow 0 run --env prod
    job=$(sed -n 's/.*"job":"\(flow-train-[0-9a-f]*\)".*/\1/p' .flow/runs/latest/journal.jsonl | head -n 1)
    [ -n "$job" ] || { echo "no job in the journal"; cat .flow/runs/latest/journal.jsonl; return 1; }
    run_flow 0 status
    contains "$OUT" "succeeded"
    contains "$OUT" "train"
    contains "$OUT" "$job Completed"
    contains "$OUT" "https://ml.azure.com/runs/$job"
    run_flow 0 logs train
    contains "$OUT" "\$ azureml job $job on gpu-cluster (2 nodes)"
    contains "$OUT" "status: Completed"
    remote=$(/usr/bin/python3 -c 'import json; r = json.load(open(".flow/runs/latest/run.json")); print(r["steps"][0]["remote"])')
    contains "$remote" "'job': '$job'" "run.json's remote job"
    contains "$remote" "'status': 'Completed'" "run.json's remote job"
    # a detached run's job, still running: status asks Azure ML
    aml_ctl POST config '{"phases": {"Running": 30}}' >/dev/null
    run_flow_bg run --env prod --force --detach
    wait_for_status Running
    kill -INT "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 status
    contains "$OUT" "interrupted"
    contains "$OUT" " Running"
}

test_certificate_credential() {
    start_aml
    train_pipeline
    unset AZURE_CLIENT_SECRET
    export AZURE_CLIENT_CERTIFICATE_PATH=$AML_DOUBLE_DIR/client.pem
    run_flow 0 azureml whoami --env prod
    contains "$OUT" "client certificate"
    run_flow 0 run --env prod
    contains "$(requests_of token)" "client_assertion"
    not_contains "$(cat "$AML_DOUBLE_DIR/client.pem")" "$(cat .flow/runs/latest/journal.jsonl)"
}

test_lua_step_runs_flow_inside_its_job() {
    start_aml
    sed -i 's/^environment:.*/environment: {name: "flow-runtime@latest", flow_installed: true}/' conf/prod/azureml.yml
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(function(e) return e end), inputs = "params:epochs",
        outputs = "m", name = "fit" },
}
L
    run_flow 0 run --env prod
    body=$(requests_of jobs.put)
    contains "$body" '"command": "flow run pipeline.lua --nodes fit --env=prod"'
    contains "$body" '"FLOW_IN_AZUREML_JOB": "1"'
    contains "$body" '/environments/flow-runtime/versions/2"' "the newest version of flow-runtime"
    # inside the job, the step runs there: nothing is dispatched again
    FLOW_IN_AZUREML_JOB=1 run_flow 0 list --env prod
    contains "$OUT" "local"
    not_contains "$OUT" "azureml"
}

test_list_form_datasets_get_identifier_names_in_the_job() {
    start_aml
    echo "blob_endpoint: $AZURITE_BLOB_ENDPOINT" >>conf/prod/azureml.yml     # the inputs go up to Azurite
    write conf/base/catalog.yml <<'Y'
train-set: {type: file, path: data/train.csv}
Y
    write data/train.csv <<'C'
a,b
C
    write pipeline.lua <<'L'
return pipeline{
  node{ command = distributed_job<framework = "pytorch", nodes = 2>(flow.command("cat ${inputs.train-set} > ${outputs.9lives}")),
        inputs = { "train-set", "train-set" }, outputs = "9lives", name = "prep" },
}
L
    run_flow 0 run --env prod
    no_crash
    body=$(requests_of jobs.put)
    # Azure ML's names are identifiers: the same in the bindings and the command
    contains "$body" "\"command\": \"cat '\${{inputs.train_set}}' > '\${{outputs._9lives}}'\""
    contains "$body" '"train_set": {'
    contains "$body" '"train_set_2": {'
    contains "$body" '"_9lives": {'
    not_contains "$body" '"train-set": {'
}

test_large_files_go_up_in_blocks() {
    start_aml
    train_pipeline
    head -c 41000000 /dev/urandom >weights.bin
    echo "print('train')" >train.py
    run_flow 0 run --env prod
    no_crash
    # the job's snapshot in Azurite holds the file: its block list was committed (a blob
    # whose blocks are only staged is not listed)
    job=$(sed -n 's/.*"job":"\(flow-train-[0-9a-f]*\)".*/\1/p' .flow/runs/latest/journal.jsonl | head -n 1)
    contains "$(aml_ctl GET "jobs/$job")" "proj/weights.bin" "the job's snapshot"
    contains "$(requests_of codes.put)" '"hash_version": "202208"'
    equals "$(count_of codes.put)" 1 "code versions registered"
}

test_unknown_workspace_environment_stops_the_run_before_submitting() {
    start_aml
    train_pipeline
    sed -i 's/^environment:.*/environment: no-such-env@latest/' conf/prod/azureml.yml
    run_flow 2 run --env prod
    contains "$ERR" "step 'train' (pipeline.lua:4) runs on Azure ML, but environment no-such-env@latest:"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

test_dispatch_modes_decide_where_steps_run() {
    start_aml
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "python", "prep.py" }, name = "prep", tags = { "gpu" } },
  node{ command = { "python", "eval.py" }, name = "eval" },
  node{ func = distributed_job<framework = "mpi", nodes = 3, processes_per_node = 2>(flow.command{ "python", "t.py" }),
        name = "train" },
}
L
    run_flow 0 list --env prod
    contains "$OUT" "prep   local"
    contains "$OUT" "train  azureml cpu-cluster ×3 nodes ×2 proc"
    sed -i 's/^compute:/dispatch: tagged\ncompute:/' conf/prod/azureml.yml
    run_flow 0 list --env prod
    contains "$OUT" "prep   azureml gpu-cluster"
    contains "$OUT" "eval   local"
    sed -i 's/^dispatch: tagged/dispatch: all/' conf/prod/azureml.yml
    run_flow 0 list --env prod
    contains "$OUT" "eval   azureml cpu-cluster"
    sed -i 's/^dispatch: all/dispatch: none/' conf/prod/azureml.yml
    run_flow 0 list --env prod
    not_contains "$OUT" "azureml"
    # the MPI body
    sed -i 's/^dispatch: none/dispatch: distributed/' conf/prod/azureml.yml
    run_flow 0 run --env prod --nodes train
    contains "$(requests_of jobs.put)" '"distributionType": "Mpi"'
    contains "$(requests_of jobs.put)" '"instanceCount": 3'
    # TensorFlow: a worker per process, and its parameter servers
    sed -i 's/framework = "mpi", nodes = 3, processes_per_node = 2/framework = "tensorflow", nodes = 2, processes_per_node = 2, parameter_server_count = 1/' pipeline.lua
    run_flow 0 run --env prod --nodes train
    body=$(requests_of jobs.put | tail -n 1)
    contains "$body" '"distributionType": "TensorFlow"'
    contains "$body" '"workerCount": 4'
    contains "$body" '"parameterServerCount": 1'
}

test_second_ctrl_c_stops_waiting_for_the_cancel() {
    start_aml
    train_pipeline
    aml_ctl POST config '{"phases": {"Running": 60}, "cancel_seconds": 60}' >/dev/null
    run_flow_bg run --env prod
    wait_for_status Running
    kill -INT "$FLOW_PID"
    wait_for_status CancelRequested
    kill -INT "$FLOW_PID"
    set +e; wait "$FLOW_PID"; code=$?; set -e
    equals "$code" 130 "exit status"
    equals "$(count_of jobs.cancel)" 1 "cancel requests"
}

test_timeout_cancels_the_job() {
    start_aml
    timed_train_pipeline
    run_flow 1 run --env prod
    contains "$ERR" "step 'train' timed out after 1s"
    equals "$(count_of jobs.cancel)" 1 "cancel requests"
    contains "$(requests_of jobs.put)" '"timeout": "PT1S"'
}

test_retry_submits_a_job_of_its_own() {
    start_aml
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(flow.command{ "python", "train.py" }),
        name = "train", retries = 1 },
}
L
    aml_ctl POST faults '{"match": {"method": "PUT", "path_regex": "/jobs/"}, "action": "status", "status": 400, "count": 1}' >/dev/null
    run_flow 0 run --env prod
    contains "$ERR" "retrying"
    names=$(requests_of jobs.put | sed -n 's/.*"path": "[^"]*\/jobs\/\([^"?]*\)".*/\1/p' | sort -u)
    contains "$names" "-a2"
}

# A parameter that holds a credential's value (both read one environment
# variable) would reach the job's command line, visible in Azure ML studio:
# the step fails before its job is submitted, as ${credentials.x} is
# refused; flow compile refuses to write it to a file.
test_a_parameter_holding_a_credential_never_reaches_a_job() {
    start_aml
    write conf/prod/credentials.yml <<'Y'
api: ${env:FLOW_TEST_KEY}
Y
    cat >>conf/base/parameters.yml <<'Y'
key: ${env:FLOW_TEST_KEY}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(flow.command{ "python", "train.py", "--key", "${params.key}" }),
        name = "train" },
}
L
    export FLOW_TEST_KEY=hunter2-param-secret
    run_flow 1 run --env prod
    contains "$ERR" "step 'train': \${params.key} holds a credential's value (a parameter set to one)"
    equals "$(count_of jobs.put)" 0 "jobs submitted"
    run_flow 2 compile --env prod -o job.yml
    contains "$ERR" "\${params.key} holds a credential's value"
    [ ! -e job.yml ] || { echo "a job file was written"; return 1; }
    not_contains "$OUT$ERR" "hunter2-param-secret" "flow's output"
    # the command's own words are not a parameter's: a credential's user name
    # (train) in them is no leak (flow compile refused python train.py)
    write conf/prod/credentials.yml <<'Y'
warehouse: {user: train, password: hunter2-secret}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = distributed_job<framework = "pytorch", nodes = 2>(flow.command{ "python", "train.py" }), name = "train" },
}
L
    run_flow 0 compile --env prod -o job.yml
    # the same value as one of azureml.yml's environment_variables: every job's
    cat >>conf/prod/azureml.yml <<'Y'
  API_KEY: ${env:FLOW_TEST_KEY}
Y
    write conf/prod/credentials.yml <<'Y'
api: ${env:FLOW_TEST_KEY}
Y
    run_flow 2 compile --env prod -o job.yml
    contains "$ERR" "environment_variables: 'API_KEY' holds a credential's value"
    not_contains "$OUT$ERR" "hunter2-param-secret" "flow's output"
    # a Lua step's job runs flow with the run's --params: one holding a
    # credential's value is refused there too
    sed -i '/API_KEY/d' conf/prod/azureml.yml
    sed -i 's/^environment:.*/environment: {name: "flow-runtime@latest", flow_installed: true}/' conf/prod/azureml.yml
    write pipeline.lua <<'L'
return pipeline{ node{ func = distributed_job<framework = "pytorch", nodes = 2>(function(e) return e end),
                       inputs = "params:epochs", outputs = "m", name = "fit" } }
L
    rm -f job.yml
    run_flow 2 compile --env prod --params epochs=hunter2-param-secret -o job.yml
    contains "$ERR" "--params holds a credential's value"
    [ ! -e job.yml ] || { echo "a job file was written"; return 1; }
    run_flow 1 run --env prod --params epochs=hunter2-param-secret
    contains "$ERR" "--params holds a credential's value"
    not_contains "$(requests_of jobs.put)" "hunter2-param-secret" "a job"
    not_contains "$OUT$ERR" "hunter2-param-secret" "flow's output"
    unset FLOW_TEST_KEY
}
