# double_lib.sh — start and drive the AML double from bash tests.
#   source "$FLOW_ROOT/tests/aml/double_lib.sh"
#   aml_double_start [DIR] [double.py flags...]   # starts it, waits for DIR/port, sources DIR/env.sh,
#                                                 # stops it when the (sub)shell exits
#   aml_token                                     # a client-secret access token on stdout
#   aml_curl ARGS...                              # curl with the double's CA
#   aml_ctl METHOD PATH [JSON]                    # the control API: aml_ctl POST faults '{"action":...}'
#   aml_double_stop
#   aml_double_start_executing [DIR] [flags...]   # Azurite (in DIR/azurite) + the double with --blob-endpoint
#                                                 # and --execute-jobs: jobs really run (tests/aml/aml_exec.py);
#                                                 # both stop when the (sub)shell exits
# After aml_double_start: AML_DOUBLE_DIR, AML_DOUBLE_PID and every AML_DOUBLE_* of DIR/env.sh
# (AML_DOUBLE_URL, AML_DOUBLE_CA_FILE, AML_DOUBLE_TENANT, AML_DOUBLE_CLIENT_ID, AML_DOUBLE_CLIENT_SECRET,
# AML_DOUBLE_WORKSPACE_URL, ...).  No AZURE_* variable is set: a test chooses its credential.

AML_DOUBLE_PY=/usr/bin/python3
AML_DOUBLE_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Whether this machine can run the double (Debian's python3 with jsonschema and cryptography, openssl).
aml_double_available() {
    command -v openssl >/dev/null && command -v curl >/dev/null &&
        "$AML_DOUBLE_PY" -c 'import jsonschema, cryptography' 2>/dev/null
}

aml_double_start() {
    local dir=${1:-$PWD/aml-double}
    [ $# -gt 0 ] && shift
    mkdir -p "$dir"
    rm -f "$dir/port"
    "$AML_DOUBLE_PY" "$AML_DOUBLE_HOME/double.py" --dir "$dir" "$@" >"$dir/double.log" 2>&1 &
    AML_DOUBLE_PID=$!
    trap aml_double_stop EXIT
    local i
    for i in $(seq 300); do
        [ -s "$dir/port" ] && break
        if ! kill -0 "$AML_DOUBLE_PID" 2>/dev/null; then
            echo "the AML double did not start:"; cat "$dir/double.log"; return 1
        fi
        sleep 0.05
    done
    [ -s "$dir/port" ] || { echo "the AML double did not write $dir/port"; cat "$dir/double.log"; return 1; }
    # shellcheck disable=SC1091
    set -a; . "$dir/env.sh"; set +a
}

aml_double_stop() {
    if [ -n "${AML_DOUBLE_PID:-}" ]; then
        kill -TERM "$AML_DOUBLE_PID" 2>/dev/null || true
        wait "$AML_DOUBLE_PID" 2>/dev/null || true
        AML_DOUBLE_PID=
    fi
}

aml_curl() {
    curl -sS --max-time 20 --cacert "$AML_DOUBLE_CA_FILE" "$@"
}

aml_token() {
    aml_curl --data-urlencode grant_type=client_credentials --data-urlencode "client_id=$AML_DOUBLE_CLIENT_ID" \
        --data-urlencode "client_secret=$AML_DOUBLE_CLIENT_SECRET" \
        --data-urlencode scope=https://management.azure.com/.default "$AML_DOUBLE_TOKEN_URL" |
        "$AML_DOUBLE_PY" -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
}

aml_ctl() {
    local method=$1 path=$2 body=${3:-}
    if [ -n "$body" ]; then
        aml_curl -X "$method" -H 'Content-Type: application/json' --data "$body" "$AML_DOUBLE_URL/_double/$path"
    else
        aml_curl -X "$method" "$AML_DOUBLE_URL/_double/$path"
    fi
}

# azurite_start DIR [AZURITE FLAGS...] — Azurite's blob service (tools/azurite.sh installs it)
# on a free port, data in DIR; sets AZURITE_BLOB_ENDPOINT (http://127.0.0.1:PORT/devstoreaccount1)
# and AZURITE_PID.  The caller stops it (azurite_stop).  `--debug FILE` logs every request.
# --disableTelemetry: it would otherwise try to reach an outside service;
# --skipApiVersionCheck: it refuses an x-ms-version newer than its own.
azurite_start() {
    local dir=$1 bin port i
    shift
    bin=$("$AML_DOUBLE_HOME/../../tools/azurite.sh") || return 1
    mkdir -p "$dir"
    port=$("$AML_DOUBLE_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$bin" --blobHost 127.0.0.1 --blobPort "$port" --location "$dir" --silent --disableTelemetry --skipApiVersionCheck "$@" \
        >"$dir/azurite.log" 2>&1 &
    AZURITE_PID=$!
    for i in $(seq 200); do
        if "$AML_DOUBLE_PY" -c "import socket, sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; then
            AZURITE_BLOB_ENDPOINT=http://127.0.0.1:$port/devstoreaccount1
            return 0
        fi
        kill -0 "$AZURITE_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "azurite did not start:"; cat "$dir/azurite.log"; return 1
}

azurite_stop() {
    if [ -n "${AZURITE_PID:-}" ]; then
        kill "$AZURITE_PID" 2>/dev/null || true
        wait "$AZURITE_PID" 2>/dev/null || true
        AZURITE_PID=
    fi
}

# aml_double_start_executing [DIR] [double.py flags...] — blob storage (Azurite, in DIR/azurite) and a double
# whose jobs really run (--execute-jobs): datastores, listSecrets, inputs and outputs on real blobs.
# Sets what aml_double_start and azurite_start set; stops both on exit.
aml_double_start_executing() {
    local dir=${1:-$PWD/aml-double}
    [ $# -gt 0 ] && shift
    azurite_start "$dir/azurite" || return 1
    aml_double_start "$dir" --blob-endpoint "$AZURITE_BLOB_ENDPOINT" --execute-jobs "$@" || { azurite_stop; return 1; }
    trap 'aml_double_stop; azurite_stop' EXIT
}
