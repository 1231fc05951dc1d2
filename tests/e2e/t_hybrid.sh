# t_hybrid.sh — hybrid runs: data crossing between steps here and Azure ML
# jobs through the workspace datastore.  Azure ML is the strict double
# (tests/aml/double.py), which runs each job's command for real; the
# datastore is real blob storage: Azurite.

source "$FLOW_ROOT/tests/aml/double_lib.sh"

# One Azurite for the suite, logging every request (what crossed the wire).
AZURITE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/flow-azurite.XXXXXX")
AZURITE_REQUESTS=$AZURITE_DIR/requests.log
azurite_start "$AZURITE_DIR" --debug "$AZURITE_REQUESTS" || exit 1
trap 'azurite_stop; rm -rf "$AZURITE_DIR"' EXIT
AZURITE_KEY=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==

python_with_torch() {
    for py in "${FLOW_PYTHON:-}" /usr/bin/python3 python3; do
        [ -n "$py" ] && "$py" -c "import torch" 2>/dev/null && { echo "$py"; return 0; }
    done
    return 0
}

# The double with jobs that run, and a credential for it.
start_aml() {
    aml_double_available || { echo "the AML double needs /usr/bin/python3 with jsonschema and cryptography, openssl and curl (make test-deps)"; return 1; }
    aml_double_start "$PWD/double" --phase-seconds 0.05 --blob-endpoint "$AZURITE_BLOB_ENDPOINT" --execute-jobs "$@"
    export FLOW_CA_BUNDLE=$AML_DOUBLE_CA_FILE AZURE_AUTHORITY_HOST=$AML_DOUBLE_URL
    export AZURE_TENANT_ID=$AML_DOUBLE_TENANT AZURE_CLIENT_ID=$AML_DOUBLE_CLIENT_ID
    export AZURE_CLIENT_SECRET=$AML_DOUBLE_CLIENT_SECRET AZURITE_BLOB_ENDPOINT
}

# A project in ./proj (the working directory from then on) with conf/prod.
new_project() {
    mkdir -p proj
    cd proj
    printf 'stdout.txt\nstderr.txt\n' >.amlignore
    write conf/prod/azureml.yml <<Y
subscription_id: $AML_DOUBLE_SUBSCRIPTION
resource_group: $AML_DOUBLE_RESOURCE_GROUP
workspace: $AML_DOUBLE_WORKSPACE
experiment_name: flow-hybrid
arm_endpoint: $AML_DOUBLE_URL
blob_endpoint: $AZURITE_BLOB_ENDPOINT
compute: cpu-cluster
environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest
dispatch: tagged
poll_interval: 0.1
Y
    sed -i 's/^compute: cpu-cluster/compute:\n  __default__: cpu-cluster\n  aml: cpu-cluster/' conf/prod/azureml.yml
}

requests_of() {
    grep -F "\"op\": \"$1\"" "$AML_DOUBLE_REQUESTS_LOG" || true
}

count_of() {
    requests_of "$1" | grep -c . || true
}

# Blob requests Azurite served since the mark (a line count of its log).
azurite_mark() { wc -l <"$AZURITE_REQUESTS"; }
azurite_since() { tail -n +"$(( $1 + 1 ))" "$AZURITE_REQUESTS"; }
# Requests that moved data (Put Blob, Put Block, Get Blob) under flow/.
data_requests_since() {
    azurite_since "$1" | grep -E 'RequestURL=|url=' | grep -F '/flow/' | grep -vE 'comp=list|HEAD' || true
}

# Nothing flow wrote holds a secret: the client secret, the token, the
# account key, a SAS signature.
no_secrets() {
    local tok hits
    tok=$(aml_token)
    for s in "$AML_DOUBLE_CLIENT_SECRET" "$AZURITE_KEY" "sig="; do
        not_contains "$OUT$ERR" "$s" "flow's output"
    done
    # (flow's own files: not the data steps wrote, random bytes of which hold
    # "sig=" now and then: 40 MB of them about once in a hundred runs)
    hits=$(grep -rlF --exclude-dir=data --exclude-dir=datastore --exclude-dir=azureml \
           -e "$AML_DOUBLE_CLIENT_SECRET" -e "$tok" -e "sig=" -e "$AZURITE_KEY" .flow || true)
    equals "$hits" "" "files under .flow/ holding a secret"
}

# The pipeline of the issue: the example itself, local split -> upload ->
# DDP training on 2 instances x 1 process "on Azure ML" -> download -> local
# evaluation.
test_pytorch_ddp_example_trains_on_azureml_end_to_end() {
    py=$(python_with_torch)
    [ -n "$py" ] || skip "no python3 with torch (python3-torch)"
    start_aml
    copy_example pytorch_ddp ex
    cd ex
    FLOW_PYTHON=$py run_flow 0 run --env test_azureml
    no_crash
    contains "$OUT" "trained on 2 process(es)"
    loss=$(printf '%s\n' "$OUT" | sed -n 's/.*loss \([0-9.]*\) -> \([0-9.]*\) over.*/\1 \2/p')
    read -r first last <<<"$loss"
    "$AML_DOUBLE_PY" -c "import sys; sys.exit(0 if float('$last') < float('$first') / 4 else 1)" ||
        { echo "loss did not fall: $first -> $last"; return 1; }
    test -s .flow/data/model/model.pt
    body=$(requests_of jobs.put)
    contains "$body" '"jobInputType": "uri_file"'
    contains "$body" '"uri": "azureml://datastores/workspaceblobstore/paths/flow/ex/'
    contains "$body" '"mode": "ReadOnlyMount"'
    contains "$body" '--data ${{inputs.train_set}}'
    contains "$body" '"instanceCount": 2'
    no_secrets
    # a second run with nothing changed moves nothing and submits nothing
    mark=$(azurite_mark)
    FLOW_PYTHON=$py run_flow 0 run --env test_azureml
    equals "$(count_of jobs.put)" 1 "PUTs"
    equals "$(data_requests_since "$mark")" "" "blob requests of the second run"
}

# A 50 MB folder made here goes up in blocks, a job copies it to its output,
# and it comes back byte-identical to a step here.
test_large_folder_round_trips_through_a_job() {
    start_aml
    new_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "mkdir -p ${outputs.data}/sub && head -c 41943040 /dev/urandom > ${outputs.data}/big.bin"
          .. " && head -c 10485760 /dev/urandom > ${outputs.data}/sub/ten.bin && echo hi > '${outputs.data}/a & b.txt'",
        outputs = "data", name = "make" },
  node{ command = "cp -R ${inputs.data}/. ${outputs.copy}/", inputs = "data", outputs = "copy", name = "copy",
        tags = { "aml" } },
  node{ command = "diff -r ${inputs.data} ${inputs.copy} && echo same > ${outputs.verdict}",
        inputs = { "data", "copy" }, outputs = "verdict", name = "compare" },
}
L
    mark=$(azurite_mark)
    run_flow 0 run --env prod
    no_crash
    equals "$(cat .flow/data/verdict)" same "the comparison"
    contains "$(azurite_since "$mark")" "comp=block" "Azurite's requests (block uploads)"
    contains "$ERR" "MB/s" "the transfer's progress"
    no_secrets
}

# A job's output that only another job reads stays on the datastore: the
# second job binds the first one's output path; nothing is downloaded.
test_output_read_only_by_a_job_stays_remote() {
    start_aml
    new_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo 21 > ${outputs.half}/n", outputs = "half", name = "first", tags = { "aml" } },
  node{ command = "echo $(( $(cat ${inputs.half}/n) * 2 )) > ${outputs.whole}/n", inputs = "half",
        outputs = "whole", name = "second", tags = { "aml" } },
  node{ command = "cp ${inputs.whole}/n ${outputs.answer}", inputs = "whole", outputs = "answer", name = "here" },
}
L
    run_flow 0 run --env prod
    equals "$(cat .flow/data/answer)" 42 "the answer"
    test ! -e .flow/data/half || { echo "'half' was downloaded"; return 1; }
    second=$(requests_of jobs.put | grep '"displayName": "second"')
    contains "$second" '/runs/flow-first-' "the second job's input binding"
    # a step here that reads it later brings it here; the job is not run again
    sed -i 's/^}$/  node{ command = "cp ${inputs.half}\/n ${outputs.h}", inputs = "half", outputs = "h", name = "later" },\n}/' pipeline.lua
    run_flow 0 run --env prod
    equals "$(cat .flow/data/h)" 21 "the later step's copy"
    equals "$(count_of jobs.put)" 2 "PUTs"
}

# Killed while uploading, then --resume: what had gone up is not sent again.
test_kill_during_upload_then_resume() {
    start_aml
    new_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "mkdir -p ${outputs.data} && for i in $(seq 300); do head -c 65536 /dev/urandom > ${outputs.data}/f$i; done",
        outputs = "data", name = "make" },
  node{ command = "ls ${inputs.data} | wc -l > ${outputs.count}/n", inputs = "data", outputs = "count",
        name = "count", tags = { "aml" } },
  node{ command = "cp ${inputs.count}/n ${outputs.n}", inputs = "count", outputs = "n", name = "here" },
}
L
    mark=$(azurite_mark)
    run_flow_bg run --env prod
    for i in $(seq 400); do
        [ "$(azurite_since "$mark" | grep -c 'PUT.*/flow/proj/' || true)" -ge 30 ] && break
        sleep 0.05
    done
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 run --resume
    equals "$(tr -d ' ' < .flow/data/n)" 300 "files the job saw"
    # only what was in flight at the kill (8 requests at most) is sent again
    puts=$(azurite_since "$mark" | grep -oE 'PUT [^ ]*/flow/proj/[^ ?]*' | grep -v '/runs/' | sort)
    equals "$(printf '%s\n' "$puts" | sort -u | wc -l)" 300 "blobs uploaded"
    again=$(printf '%s\n' "$puts" | uniq -d | wc -l)
    [ "$again" -le 8 ] || { echo "$again blobs sent again after --resume (at most 8 were in flight)"; return 1; }
    equals "$(find .flow/data -name '*.flowpart' | wc -l)" 0 "partial files"
}

# Killed while downloading, then --resume: the job is adopted, finished
# files are kept, and no partial file is ever left under a real name.
test_kill_during_download_then_resume() {
    start_aml
    new_project
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "for i in $(seq 40); do head -c 1048576 /dev/urandom > ${outputs.data}/f$i; done",
        outputs = "data", name = "make", tags = { "aml" } },
  node{ command = "ls ${inputs.data} | wc -l > ${outputs.count}", inputs = "data", outputs = "count", name = "here" },
}
L
    run_flow_bg run --env prod
    for i in $(seq 600); do
        ls .flow/tmp/azureml/*/data/f* >/dev/null 2>&1 && break
        sleep 0.05
    done
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 run --resume
    equals "$(tr -d ' ' < .flow/data/count)" 40 "files downloaded"
    equals "$(count_of jobs.put)" 1 "PUTs"
    equals "$(find .flow -name '*.flowpart' | wc -l)" 0 "partial files"
}

# A datastore whose secret is a SAS token works the same, and the token's
# signature is never written anywhere.
test_sas_datastore() {
    start_aml
    aml_ctl POST config '{"datastore_secrets": "Sas"}' >/dev/null
    new_project
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return { 1, 2, 3 } end, outputs = "xs", name = "make" },
  node{ command = "cat ${inputs.xs} > ${outputs.copy}/xs.json", inputs = "xs", outputs = "copy", name = "copy",
        tags = { "aml" } },
  node{ func = function(dir) local f = assert(io.open(dir .. "/xs.json")); local t = f:read("a"); f:close(); print("got " .. t) end,
        inputs = "copy", name = "show" },
}
L
    run_flow 0 run --env prod -v
    contains "$OUT" "got [1, 2, 3]"
    contains "$(requests_of datastores.listSecrets)" '"status": 200'
    no_secrets
}

test_bad_blob_endpoint_is_an_error_with_its_line() {
    start_aml
    new_project
    sed -i 's|^blob_endpoint: .*|blob_endpoint: http://blob.example.com/x|' conf/prod/azureml.yml
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", tags = { "aml" } } }
L
    run_flow 2 run --env prod
    contains "$ERR" "conf/prod/azureml.yml:6: blob_endpoint must be an https:// URL"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

test_unknown_datastore_fails_the_step_with_its_name() {
    start_aml
    new_project
    printf 'datastore: nosuchstore\n' >>conf/prod/azureml.yml
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "x" end, outputs = "x", name = "make" },
  node{ command = "cat ${inputs.x}", inputs = "x", name = "use", tags = { "aml" } },
}
L
    run_flow 1 run --env prod
    contains "$ERR" "datastore 'nosuchstore'"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

# The datastore's blob NAME, as another tool would write or read it (the
# double's own Shared Key client, tests/aml/aml_blob.py).
blob_put() {
    "$AML_DOUBLE_PY" - "$1" "$2" <<'P'
import os, sys
sys.path.insert(0, os.environ["FLOW_ROOT"] + "/tests/aml")
import aml_blob
store = aml_blob.BlobStore(os.environ["AZURITE_BLOB_ENDPOINT"], aml_blob.AZURITE_KEY,
                           os.environ["AML_DOUBLE_DATASTORE_CONTAINER"].rsplit("/", 1)[1])
why = store.put_bytes(sys.argv[1], sys.argv[2].encode())
sys.exit(why)
P
}

blob_get() {
    "$AML_DOUBLE_PY" - "$1" <<'P'
import os, sys
sys.path.insert(0, os.environ["FLOW_ROOT"] + "/tests/aml")
import aml_blob
store = aml_blob.BlobStore(os.environ["AZURITE_BLOB_ENDPOINT"], aml_blob.AZURITE_KEY,
                           os.environ["AML_DOUBLE_DATASTORE_CONTAINER"].rsplit("/", 1)[1])
status, body = store.get_bytes(sys.argv[1])
sys.stdout.write(body.decode() if status == 200 else "HTTP %d" % status)
P
}

# Catalog entries on the datastore: a step here reads one (brought down
# first) and writes one (sent up after); a job binds them where they are.  A
# change made on the datastore by someone else reruns what reads it.
test_catalog_entries_on_the_datastore() {
    start_aml
    new_project
    blob_put shared/raw.txt "hello"
    write conf/prod/catalog.yml <<'Y'
raw: {type: text, path: azureml://datastores/workspaceblobstore/paths/shared/raw.txt}
note: {type: text, path: azureml://datastores/workspaceblobstore/paths/shared/note.txt}
loud: {type: folder, path: azureml://datastores/workspaceblobstore/paths/shared/loud}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(raw) return raw .. " from here" end, inputs = "raw", outputs = "note", name = "here" },
  node{ command = "tr a-z A-Z < ${inputs.note} > ${outputs.loud}/x.txt", inputs = "note", outputs = "loud",
        name = "shout", tags = { "aml" } },
  node{ func = function(dir)
          local f = assert(io.open(dir .. "/x.txt")); print("got " .. f:read("l")); f:close()
        end, inputs = "loud", name = "show" },
}
L
    run_flow 0 list --env prod
    run_flow 0 catalog list --env prod
    contains "$OUT" "azureml://datastores/workspaceblobstore/paths/shared/loud"
    run_flow 0 run --env prod
    no_crash
    contains "$OUT" "got HELLO FROM HERE"
    equals "$(blob_get shared/note.txt)" "hello from here" "the datastore's note.txt"
    equals "$(blob_get shared/loud/x.txt)" "HELLO FROM HERE" "the datastore's loud/x.txt"
    body=$(requests_of jobs.put)
    contains "$body" '"uri": "azureml://datastores/workspaceblobstore/paths/shared/note.txt"'
    contains "$body" '"uri": "azureml://datastores/workspaceblobstore/paths/shared/loud"'
    # nothing changed: nothing runs, nothing is submitted
    run_flow 0 run --env prod
    not_contains "$OUT" "got"
    equals "$(count_of jobs.put)" 1 "PUTs"
    # the datastore's raw.txt changed: everything after it runs again
    blob_put shared/raw.txt "bye"
    run_flow 0 run --env prod
    contains "$OUT" "got BYE FROM HERE"
    equals "$(count_of jobs.put)" 2 "PUTs"
    no_secrets
}

# A folder on the datastore holds what its producer wrote in the last run,
# nothing of the runs before: a producer here that writes fewer files (the
# upload deletes the rest), and a job that does (the folder is emptied before
# it is submitted).  Both kept the earlier files: the job read a b c where
# the producer had written a, and a reader here was skipped as up to date.
test_a_datastore_folder_holds_only_the_last_runs_files() {
    start_aml
    new_project
    write conf/base/parameters.yml <<'Y'
files: "a,b,c"
Y
    write conf/prod/catalog.yml <<'Y'
feats: {type: folder, path: azureml://datastores/workspaceblobstore/paths/p11/feats}
more: {type: folder, path: azureml://datastores/workspaceblobstore/paths/p11/more}
listing: {type: text, path: data/listing.txt}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "for f in $(echo ${params.files} | tr , ' '); do echo $f > ${outputs.feats}/$f.txt; done",
        outputs = "feats", name = "make" },
  node{ command = "[ ${params.files} != x ] || exit 3; ls ${inputs.feats} | tr '\n' ' ' > ${outputs.more}/seen.txt; for f in $(echo ${params.files} | tr , ' '); do echo $f > ${outputs.more}/$f.txt; done",
        inputs = "feats", outputs = "more", name = "job", tags = { "aml" } },
  node{ command = "ls ${inputs.more} | tr '\n' ' ' > ${outputs.listing}", inputs = "more", outputs = "listing",
        name = "count" },
}
L
    run_flow 0 run --env prod
    equals "$(blob_get p11/more/seen.txt)" "a.txt b.txt c.txt " "what the job saw"
    equals "$(cat data/listing.txt)" "a.txt b.txt c.txt seen.txt " "what the reader here saw"
    run_flow 0 run --env prod --params files=a
    equals "$(blob_get p11/more/seen.txt)" "a.txt " "what the job saw after the producer wrote one file"
    equals "$(blob_get p11/feats/b.txt)" "HTTP 404" "a file the producer no longer writes"
    equals "$(cat data/listing.txt)" "a.txt seen.txt " "what the reader here saw after the job wrote one file"
    # a job that fails once its folder was emptied leaves no record standing
    # for the parameters before: the job runs again (it was up to date, its
    # folder empty)
    run_flow 1 run --env prod --params files=x
    run_flow 0 run --env prod --params files=a
    equals "$(blob_get p11/more/seen.txt)" "a.txt " "the folder, made again"
    no_secrets
}

test_catalog_entry_on_a_datastore_is_checked() {
    start_aml
    new_project
    write pipeline.lua <<'L'
return pipeline{ node{ func = function(x) return x end, inputs = "raw", outputs = "y", name = "a" } }
L
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: "azureml://datastores/workspaceblobstore/shared/raw.txt"}
Y
    run_flow 2 run --env prod
    contains "$ERR" "catalog.yml:1: catalog entry 'raw': path azureml://datastores/workspaceblobstore/shared/raw.txt must be azureml://datastores/<datastore>/paths/<path>"
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: "azureml://datastores/workspaceblobstore/paths/shared/none.txt"}
Y
    run_flow 2 run --env prod
    contains "$ERR" "'raw' (text dataset"
    contains "$ERR" "there is no blob named shared/none.txt"
    run_flow 2 run
    contains "$ERR" "catalog entry 'raw' (conf/base/catalog.yml:1) is on a datastore"
    equals "$(count_of jobs.put)" 0 "PUTs"
}

# flow run --submit-pipeline: the selected steps as one Azure ML pipeline job
# (a component per step, data bound job to job), which the double runs child
# by child; the local raw data goes up first.
submit_project() {
    new_project
    mkdir -p data
    printf 'abc\n' >data/raw.txt
    write conf/base/catalog.yml <<'Y'
raw: {type: file, path: data/raw.txt}
Y
    write conf/base/parameters.yml <<'Y'
times: 3
Y
    write pipeline.lua <<'L'
local ranks = distributed_job{ framework = "pytorch", num_nodes = 2 }(
  flow.command{ "sh", "-c", 'cp "$0/up" "$1/rank_$RANK" && echo "rank $RANK of $WORLD_SIZE"', "${inputs.up}",
                "${outputs.ranks}" })
return pipeline{
  node{ command = "tr a-z A-Z < ${inputs.raw} > ${outputs.up}/up", inputs = { raw = "raw" },
        outputs = { up = "upper" }, name = "shout" },
  node{ command = "for i in $(seq ${params.times}); do cat ${inputs.up}/up; done | tee ${outputs.rep}/rep",
        inputs = { up = "upper" }, outputs = { rep = "repeated" }, name = "repeat" },
  node{ func = ranks, inputs = { up = "upper" }, outputs = { ranks = "ranks" }, name = "fan.out" },
}
L
}

test_submit_pipeline_runs_the_dag_as_one_pipeline_job() {
    start_aml
    submit_project
    run_flow 0 run --env prod --submit-pipeline
    no_crash
    job=$(printf '%s\n' "$ERR" | sed -n 's/.*as Azure ML pipeline job \(flow-pipeline-proj-[0-9a-f]*\).*/\1/p' | head -1)
    [ -n "$job" ] || { echo "no pipeline job named in:"; printf '%s\n' "$ERR"; return 1; }
    contains "$ERR" "pipeline: 3 steps as Azure ML pipeline job $job"
    contains "$ERR" "pipeline job $job Completed"
    equals "$(count_of components.put)" 3 "component versions registered"
    equals "$(count_of jobs.put)" 1 "jobs PUT by flow"
    body=$(requests_of jobs.put)
    contains "$body" '"jobType": "Pipeline"'
    contains "$body" '"value": "${{parent.jobs.shout.outputs.up}}"'
    contains "$body" '"distribution_type": "PyTorch"'
    contains "$body" "/runs/$job/shout/up/"
    # the double ran each child, in the order the data asks, with the data
    equals "$(aml_ctl GET "jobs/$job" | "$AML_DOUBLE_PY" -c 'import json,sys; print(json.load(sys.stdin)["status"])')" \
        Completed "the pipeline job"
    log=$(aml_ctl GET "jobs/$job-repeat/std_log.txt")
    contains "$log" "ABC
ABC
ABC" "repeat's log: the raw data, uppercased by shout, three times (params: times)"
    log=$(aml_ctl GET "jobs/$job-fan_out/std_log.txt")
    contains "$log" "rank 1 of 2" "fan.out's log: 2 processes"
    shout=$(aml_ctl GET "jobs/$job-shout" | "$AML_DOUBLE_PY" -c 'import json,sys; print(json.load(sys.stdin)["history"][-1]["t"])')
    repeat=$(aml_ctl GET "jobs/$job-repeat" | "$AML_DOUBLE_PY" -c 'import json,sys; print(json.load(sys.stdin)["history"][0]["t"])')
    "$AML_DOUBLE_PY" -c "import sys; sys.exit(0 if $repeat >= $shout else 1)" ||
        { echo "repeat was submitted before shout completed"; return 1; }
    no_secrets
    # flow status knows the run as its pipeline job
    run_flow 0 status
    contains "$OUT" "succeeded"
    contains "$OUT" "pipeline"
    contains "$OUT" "$job Completed"
    # the same steps again: the same component versions (immutable), a new pipeline job
    run_flow 0 run --env prod --submit-pipeline
    equals "$(requests_of components.put | grep -c '"status": 201' || true)" 3 "component versions created"
    equals "$(count_of jobs.put)" 2 "jobs PUT by flow"
}

test_submit_pipeline_failure_detach_cancel_and_resume() {
    start_aml
    submit_project
    # a failing step fails the pipeline job: exit status 1, the child's error
    sed -i 's/tr a-z A-Z < ${inputs.raw} > ${outputs.up}\/up/echo broken >\&2; exit 3/' pipeline.lua
    run_flow 1 run --env prod --submit-pipeline
    job=$(printf '%s\n' "$ERR" | sed -n 's/.*as Azure ML pipeline job \(flow-pipeline-proj-[0-9a-f]*\).*/\1/p' | head -1)
    contains "$ERR" "pipeline job $job Failed"
    contains "$(aml_ctl GET "jobs/$job-shout")" "status code 3" "the child's error"
    contains "$(aml_ctl GET "jobs/$job")" "child job $job-shout (shout) Failed" "the pipeline's error"
    contains "$(aml_ctl GET "jobs/$job-repeat")" "no job $job-repeat" "repeat, which reads what shout makes"
    # --detach, Ctrl-C: the job is left running; flow cancel cancels it
    sed -i 's/echo broken >\&2; exit 3/sleep 30/' pipeline.lua
    run_flow_bg run --env prod --submit-pipeline --detach
    for i in $(seq 200); do grep -q "is Running" stderr.txt 2>/dev/null && break; sleep 0.1; done
    kill -INT "$FLOW_PID"
    wait "$FLOW_PID" && status=0 || status=$?
    equals "$status" 130 "exit status after Ctrl-C"
    contains "$(cat stderr.txt)" "left running (--detach)"
    run_flow 0 cancel
    contains "$ERR" "is Canceled"
    # killed while it waits: --resume waits for the same job, no second one
    sed -i 's/sleep 30/tr a-z A-Z < ${inputs.raw} > ${outputs.up}\/up/' pipeline.lua
    puts=$(count_of jobs.put)
    run_flow_bg run --env prod --submit-pipeline
    for i in $(seq 200); do [ "$(count_of jobs.put)" -gt "$puts" ] && break; sleep 0.05; done
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 run --resume
    contains "$ERR" "Completed"
    equals "$(count_of jobs.put)" $((puts + 1)) "jobs PUT by flow"
    run_flow 2 run --env prod --submit-pipeline -j 2
    contains "$ERR" "--jobs is for runs here"
}

# examples/sweep in ./ex with its train step tagged for Azure ML in prod.
sweep_project() {
    copy_example sweep ex
    cd ex
    printf 'stdout.txt\nstderr.txt\n' >.amlignore
    # the model as a file dataset: a job writes ${outputs.model} as a file
    write conf/base/catalog.yml <<'Y'
model: {type: json, path: data/model.json}
Y
    write conf/prod/azureml.yml <<Y
subscription_id: $AML_DOUBLE_SUBSCRIPTION
resource_group: $AML_DOUBLE_RESOURCE_GROUP
workspace: $AML_DOUBLE_WORKSPACE
experiment_name: flow-sweep
arm_endpoint: $AML_DOUBLE_URL
blob_endpoint: $AZURITE_BLOB_ENDPOINT
compute: {__default__: cpu-cluster, aml: cpu-cluster}
environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest
dispatch: tagged
poll_interval: 0.1
Y
    sed -i 's/        name = "train" },/        name = "train", tags = { "aml" } },/' pipeline.lua
    grep -q 'tags = { "aml" }' pipeline.lua || { echo "the example's train node changed"; return 1; }
}

# A sweep whose training step runs on Azure ML, a run per trial
# (--no-sweep-job), two at once: each trial's job writes ${outputs.metrics}
# as a file, flow brings it here and ranks the trials by it, as it does a
# local step's; the data split here goes up once; each trial's model is a
# version of its own.
test_sweep_ranks_trials_trained_on_azureml() {
    start_aml
    sweep_project
    echo 'model: {type: json, path: data/model.json, versioned: true}' >conf/base/catalog.yml
    run_flow 0 sweep --env prod --grid lr=0.01,0.5 --metric val_loss --no-sweep-job --parallel 2
    no_crash
    equals "$(count_of jobs.put)" 2 "jobs: one per trial"
    first=$(printf '%s\n' "$OUT" | sed -n 2p)
    [[ $first == "*  2      0.5"* ]] || { echo "best row: $first"; echo "$OUT"; return 1; }
    contains "$ERR" "2 of 2 trials ok, best: trial 2 (val_loss 0.030403"
    body=$(requests_of jobs.put)
    contains "$body" '"metrics": {"jobOutputType": "uri_file"'
    contains "$body" '/metrics/metrics.json'
    # the series came back too: the report draws it
    dir=$(ls -d .flow/sweeps/*)
    contains "$(cat "$dir/report.html")" '<polyline class="series best" data-trial="2"'
    equals "$(overlap_of train)" "overlap" "the trials' train steps (their jobs)"
    equals "$(ls data/model.json | wc -l)" 2 "versions of the model, one per trial"
    no_secrets
}

# The same sweep as one Azure ML sweep job: flow PUTs one job, Azure ML (the
# double) samples and runs the trials, each logging its metrics to MLflow;
# flow reads every trial back, ranks them as a local sweep does, and the
# run's train step keeps the best trial's model.
test_sweep_on_azureml_is_one_sweep_job() {
    start_aml
    sweep_project
    run_flow 0 sweep --env prod --grid lr=0.01,0.5,0.3 --metric val_loss --parallel 2 \
        --early-stop bandit,slack_amount=10,after=3
    no_crash
    equals "$(count_of jobs.put)" 1 "jobs PUT by flow: one sweep job"
    body=$(requests_of jobs.put)
    contains "$body" '"jobType": "Sweep"'
    contains "$body" '"searchSpace": {"lr": ["choice", [[0.01, 0.5, 0.3]]]}'
    contains "$body" '"objective": {"goal": "Minimize", "primaryMetric": "val_loss"}'
    contains "$body" '"maxConcurrentTrials": 2'
    contains "$body" '"policyType": "Bandit", "slackAmount": 10}'
    contains "$body" "--lr '\${{search_space.lr}}'"
    contains "$body" '/trials/${{name}}/model/model.json'
    job=$(printf '%s\n' "$ERR" | sed -n "s/.*sweep job \(flow-train-[0-9a-f]*\): 3 trials, best \([^ ]*\) .*/\1 \2/p")
    set -- $job
    [ -n "${2:-}" ] || { echo "no sweep job line"; echo "$ERR"; return 1; }
    equals "$(aml_ctl GET "jobs/$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["request"]["tags"]["hyperparameters"])')" \
        '{"lr": 0.5}' "the best trial's values (Azure ML's)"
    contains "$(aml_ctl GET "jobs/$1")" "\"best_child_run_id\": \"$2\"" "Azure ML's best is flow's"
    first=$(printf '%s\n' "$OUT" | sed -n 2p)
    [[ $first == "*  2      0.5"* ]] || { echo "best row: $first"; echo "$OUT"; return 1; }
    contains "$ERR" "3 of 3 trials ok, best: trial 2 (val_loss 0.030403"
    # the shared steps ran once, here; the run's model is the best trial's
    equals "$(printf '%s\n' "$ERR" | grep -c 'done     split' || true)" 1 "split runs"
    contains "$(cat data/model.json)" '"w"'
    dir=$(ls -d .flow/sweeps/*)
    contains "$(cat "$dir/report.html")" '<polyline class="series best" data-trial="2"'
    contains "$(cat "$dir/results.csv")" "2,0.5,0.0304"
    # resumed, a finished sweep job is not sent again
    run_flow 0 sweep --resume
    equals "$(count_of jobs.put)" 1 "jobs PUT after --resume"
    contains "$ERR" "best: trial 2"
    # killed while the sweep job runs, then --resume: it waits for the same job
    run_flow_bg sweep --env prod --grid lr=0.01,0.5 --metric val_loss -p epochs=2000
    for i in $(seq 300); do [ "$(count_of jobs.put)" -gt 1 ] && break; sleep 0.05; done
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 sweep --resume
    equals "$(count_of jobs.put)" 2 "jobs PUT: the new sweep's one"
    contains "$ERR" "2 of 2 trials ok, best: trial 2"
    no_secrets
}

# A sweep job whose trial fails on one value: the others are ranked, the
# failed one is counted; a random sweep job draws its values on Azure ML.
test_sweep_job_failed_trial_and_random_draw() {
    start_aml
    sweep_project
    run_flow 0 sweep --env prod --grid lr=-1,0.5,0.30000001,0.3 --metric val_loss
    contains "$ERR" "3 of 4 trials ok, 1 failed or stopped on Azure ML"
    contains "$ERR" "best: trial 2 (val_loss 0.030403"
    not_contains "$ERR" "finish it with"
    equals "$(count_of jobs.put)" 1 "jobs PUT by flow"
    # each trial numbered as its values are in the grid, close values too
    python3 - .flow/sweeps/*/results.json <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted((t["trial"], t["params"]["lr"]) for t in d["trials"])
assert got == [(2, 0.5), (3, 0.30000001), (4, 0.3)], got
P
    run_flow 0 sweep --env prod --grid lr=0.5,0.3 --random 2 --seed 1 --metric val_loss
    body=$(requests_of jobs.put | tail -1)
    contains "$body" '"samplingAlgorithm": {"samplingAlgorithmType": "Random", "seed": 1}'
    contains "$body" '"maxTotalTrials": 2'
    contains "$ERR" "2 of 2 trials ok"
    no_crash
    # a swept parameter in the step's environment: a run per trial, saying why
    sed -i 's/        name = "train", tags = { "aml" } },/        env = { LR = "${params.lr}" }, name = "train", tags = { "aml" } },/' pipeline.lua
    run_flow 0 sweep --env prod --grid lr=0.5 --metric val_loss
    contains "$ERR" "a run per trial, not an Azure ML sweep job: step 'train' reads 'lr' in its environment (LR)"
}

# Killed after the sweep job ended, while a step after it runs: --resume
# reads the same job's trials again (no second job) and runs that step.
test_sweep_job_kill_after_the_job_then_resume() {
    start_aml
    sweep_project
    sed -i 's/^return pipeline{/local P = pipeline{/' pipeline.lua
    cat >>pipeline.lua <<'L'
return P + pipeline{ node{ command = "sleep 3; cp ${inputs.model} ${outputs.checked}",
                           inputs = { model = "model" }, outputs = { checked = "checked" }, name = "check" } }
L
    run_flow_bg sweep --env prod --grid lr=0.01,0.5 --metric val_loss
    for _ in $(seq 600); do
        [ "$(cat .flow/sweeps/*/trials.jsonl 2>/dev/null | grep -c '"trial"')" = 2 ] && break
        sleep 0.05
    done
    equals "$(cat .flow/sweeps/*/trials.jsonl | grep -c '"trial"')" 2 "trials recorded when the job's records were read"
    kill -9 "$FLOW_PID"
    wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 sweep --resume
    equals "$(count_of jobs.put)" 1 "jobs PUT: the one sweep job"
    contains "$ERR" "2 of 2 trials ok, best: trial 2"
    contains "$ERR" "done     check"
    no_secrets
}
