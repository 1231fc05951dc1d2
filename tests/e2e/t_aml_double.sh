# t_aml_double.sh — the Azure ML test double itself (tests/aml/double.py): its
# self-test, and the shell-side use the AML suites build on (tests/aml/double_lib.sh).

source "$FLOW_ROOT/tests/aml/double_lib.sh"

need_double() {
    aml_double_available || skip "no /usr/bin/python3 with jsonschema and cryptography, or no openssl/curl (make test-deps)"
}

test_aml_double_selftest() {
    need_double
    "$AML_DOUBLE_PY" "$FLOW_ROOT/tests/aml/selftest.py" >selftest.txt 2>&1 || true
    last=$(tail -n 1 selftest.txt)
    contains "$last" "selftest:" "the self-test's last line" || { cat selftest.txt; return 1; }
    contains "$last" " 0 failed" "the self-test's last line" || { cat selftest.txt; return 1; }
}

test_aml_double_from_bash() {
    need_double
    aml_double_start "$PWD/dbl" --phase-seconds 0.1
    tok=$(aml_token)
    [ -n "$tok" ]
    write job.json <<J
{"properties": {"jobType": "Command", "command": "python train.py --lr \${{inputs.lr}}",
  "environmentId": "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/labels/latest",
  "computeId": "$AML_DOUBLE_WORKSPACE_ID/computes/cpu-cluster",
  "inputs": {"lr": {"jobInputType": "literal", "value": "0.5"}}}}
J
    code=$(aml_curl -o put.json -w '%{http_code}' -X PUT -H "Authorization: Bearer $tok" \
        -H 'Content-Type: application/json' -H 'x-ms-client-request-id: 6b1f0b9e-0000-4000-8000-000000000001' \
        --data @job.json "$AML_DOUBLE_WORKSPACE_URL/jobs/bash-job-1?api-version=$AML_DOUBLE_API_VERSION")
    equals "$code" 201 "PUT status"
    status=
    for _ in $(seq 50); do
        status=$(aml_curl -H "Authorization: Bearer $tok" \
            "$AML_DOUBLE_WORKSPACE_URL/jobs/bash-job-1?api-version=$AML_DOUBLE_API_VERSION" |
            "$AML_DOUBLE_PY" -c 'import json, sys; print(json.load(sys.stdin)["properties"]["status"])')
        [ "$status" = Completed ] && break
        sleep 0.1
    done
    equals "$status" Completed "job status"
    contains "$(aml_ctl GET jobs/bash-job-1/std_log.txt)" "--lr 0.5" "std_log.txt"
    # the request log: one line per request, tokens redacted, client request id kept
    log=$(cat "$AML_DOUBLE_REQUESTS_LOG")
    contains "$log" '"op": "jobs.put"'
    contains "$log" '"client_request_id": "6b1f0b9e-0000-4000-8000-000000000001"'
    contains "$log" '"Authorization": "Bearer <redacted>"'
    not_contains "$log" "$tok" "requests.jsonl"
    not_contains "$log" "$AML_DOUBLE_CLIENT_SECRET" "requests.jsonl"
    # a fault, driven with curl
    aml_ctl POST faults '{"match": {"method": "GET", "path_regex": "/computes/"}, "action": "status", "status": 503, "retry_after": 1, "count": 1}' >/dev/null
    code=$(aml_curl -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" \
        "$AML_DOUBLE_WORKSPACE_URL/computes/cpu-cluster?api-version=$AML_DOUBLE_API_VERSION")
    equals "$code" 503 "faulted GET"
    code=$(aml_curl -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" \
        "$AML_DOUBLE_WORKSPACE_URL/computes/cpu-cluster?api-version=$AML_DOUBLE_API_VERSION")
    equals "$code" 200 "GET after the fault"
    aml_double_stop
    if aml_curl -o /dev/null "$AML_DOUBLE_URL/_double/health" 2>/dev/null; then
        echo "the double still answers after SIGTERM"; return 1
    fi
}
