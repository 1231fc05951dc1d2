# t_credentials.sh — conf/*/credentials.yml reaching command steps: through the
# process's environment only, never on a command line, never in anything flow
# writes (logs, journal, run.json, state), never in a fingerprint.

SECRET=hunter2-SECRET-value
PIN=98765432
TOKEN=tok-abcdef-123

creds() {
    write conf/local/credentials.yml <<Y
db:
  user: app
  password: "$SECRET"
  pin: $PIN
db_creds:
  username: alice_user
  token: "$TOKEN"
Y
}

# Nothing flow wrote under .flow/ holds a secret, except outputs the steps
# themselves wrote (.flow/data/, which hold what the commands printed there)
# and, with an argument, the logs of what a process printed itself.
no_secret_in_flow_dir() {
    local hits
    hits=$(grep -rlF -e "$SECRET" -e "$PIN" -e "$TOKEN" -e alice_user .flow --exclude-dir=data ${1:+--exclude-dir=logs} || true)
    equals "$hits" "" "files under .flow/ holding a secret"
}

test_shell_command_gets_credential_through_environment() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "printf '%s' ${credentials.db.password} > ${outputs.o}; tr '\\0' ' ' < /proc/$$/cmdline > ${outputs.cmdline}; echo wrote",
        outputs = { "o", "cmdline" }, name = "shell" },
}
L
    run_flow 0 run -v
    equals "$(cat .flow/data/o)" "$SECRET" "what the process received"
    # its command line (sh -c SCRIPT) names the variable, not the value
    contains "$(cat .flow/data/cmdline)" '"$FLOW_CRED_DB_PASSWORD"' "the shell's command line"
    not_contains "$(cat .flow/data/cmdline)" "$SECRET" "the shell's command line"
    # the "$ command" header of the log shows the reference too
    contains "$(cat .flow/runs/latest/logs/shell.log)" 'printf '"'"'%s'"'"' "$FLOW_CRED_DB_PASSWORD"' "log header"
    not_contains "$OUT$ERR" "$SECRET" "-v output"
    no_secret_in_flow_dir
}

test_argv_word_with_credential_is_refused() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "tool", "--password", "${credentials.db.password}" }, outputs = "o", name = "argv" },
}
L
    run_flow 2 run
    contains "$ERR" "step 'argv' (pipeline.lua:2): \${credentials.db.password} in an argument list would put the secret on the process's command line"
    contains "$ERR" 'env = { NAME = "${credentials.db.password}" }'
    contains "$ERR" '"$FLOW_CRED_DB_PASSWORD"'
    not_contains "$ERR" "$SECRET"
    [ ! -d .flow/runs ] || { echo "a run started"; return 1; }
}

test_argv_command_gets_credential_in_env() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = flow.command{ "sh", "-c", 'printf "%s|%s" "$PGPASSWORD" "$PGUSER" > "$1"', "sh", "${outputs.o}",
                                env = { PGPASSWORD = "${credentials.db.password}", PGUSER = "u-${credentials.db.user}" } },
        outputs = "o", name = "argvenv" },
}
L
    run_flow 0 run -v
    equals "$(cat .flow/data/o)" "$SECRET|u-app" "the environment the process received"
    no_secret_in_flow_dir
}

test_missing_credential_is_a_setup_error() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo ${credentials.db.passwrd} > ${outputs.o}", outputs = "o", name = "missing" },
}
L
    run_flow 2 run
    contains "$ERR" "step 'missing' (pipeline.lua:2): credential 'db.passwrd' is not defined in environment 'local'"
    contains "$ERR" "did you mean 'db.password'?"
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo ${credentials.db} > ${outputs.o}", outputs = "o", name = "mapping" },
}
L
    run_flow 2 run
    contains "$ERR" "credential 'db' is a mapping or a list"
    not_contains "$ERR" "$SECRET"
}

test_numeric_credential_is_redacted() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo pin is ${credentials.db.pin} >&2; exit 3", outputs = "o", name = "fails" },
}
L
    run_flow 1 run
    contains "$ERR" "pin is ***"
    not_contains "$ERR" "$PIN"
    no_secret_in_flow_dir except-logs      # the process printed it: its log is the stream redactor's
}

test_credential_change_does_not_rerun() {
    creds
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "printf '%s' ${credentials.db.password} > ${outputs.o}", outputs = "o", name = "uses" },
}
L
    run_flow 0 run
    sed -i "s/$SECRET/another-SECRET-value/" conf/local/credentials.yml
    run_flow 0 run --explain
    contains "$ERR" "explain: uses is up to date"
    grep -aqF "$SECRET" .flow/cache/state.log && { echo "state.log holds the old secret"; return 1; }
    grep -aqF "another-SECRET-value" .flow/cache/state.log && { echo "state.log holds the secret"; return 1; }
    return 0
}

test_catalog_entry_credentials_reach_its_commands() {
    creds
    write conf/base/catalog.yml <<'Y'
sales: {type: text, path: data/sales.txt, credentials: db_creds}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = 'printf "%s/%s" "$FLOW_CRED_DB_CREDS_USERNAME" "$FLOW_CRED_DB_CREDS_TOKEN" > ${outputs.s}',
        outputs = { s = "sales" }, name = "writes" },
  node{ command = 'printf "%s" "$FLOW_CRED_DB_CREDS_TOKEN" > ${outputs.t}', inputs = { s = "sales" },
        outputs = { t = "seen" }, name = "reads" },
  node{ command = 'printf "[%s]" "$FLOW_CRED_DB_CREDS_TOKEN" > ${outputs.n}', outputs = { n = "other" }, name = "unrelated" },
}
L
    run_flow 0 run
    equals "$(cat data/sales.txt)" "alice_user/$TOKEN" "what the producer received"
    equals "$(cat .flow/data/seen)" "$TOKEN" "what the consumer received"
    equals "$(cat .flow/data/other)" "[]" "a step that does not use the dataset"
    no_secret_in_flow_dir
}

test_catalog_credentials_must_exist() {
    creds
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/raw.txt}
sales: {type: text, path: data/sales.txt,
        credentials: db_cred}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", outputs = "sales", name = "w" } }
L
    run_flow 2 run
    contains "$ERR" "conf/base/catalog.yml:3: catalog entry 'sales': credentials 'db_cred' is not defined in environment 'local'"
    contains "$ERR" "did you mean 'db_creds'?"
    write conf/base/catalog.yml <<'Y'
sales: {type: text, path: data/sales.txt, credentials: [a]}
Y
    run_flow 2 run
    contains "$ERR" "credentials names a block of credentials.yml"
}

test_every_local_rank_gets_the_credential() {
    creds
    write pipeline.lua <<'L'
local cmd = flow.command "printf '%s' ${credentials.db.password} > cred.$RANK"
return pipeline{ node{ func = distributed_job{ framework = "pytorch", num_nodes = 1, processes_per_node = 2 }(cmd),
                       name = "train" } }
L
    run_flow 0 run --distributed=local
    for r in 0 1; do equals "$(cat cred.$r)" "$SECRET" "what rank $r received"; done
    no_secret_in_flow_dir
}

test_node_env_gets_credential_and_joins_the_command_env() {
    creds
    write pipeline.lua <<'L'
local base = flow.command{ "sh", "-c", 'printf "%s|%s|%s" "$P" "$U" "$HOSTNAME_X" > "$1"', "sh", "${outputs.o}",
                           env = { HOSTNAME_X = "db.local" } }
return pipeline{
  node{ command = "printf '%s' \"$P\" > ${outputs.o}; tr '\\0' ' ' < /proc/$$/cmdline > ${outputs.cmdline}; echo wrote",
        env = { P = "${credentials.db.password}" }, outputs = { "o", "cmdline" }, name = "shell" },
  node{ command = base, env = { P = "${credentials.db.password}", U = "u-${credentials.db.user}" },
        outputs = { o = "merged" }, name = "merged" },
}
L
    run_flow 0 run -v
    equals "$(cat .flow/data/o)" "$SECRET" "what the shell step received"
    not_contains "$(cat .flow/data/cmdline)" "$SECRET" "the shell's command line"
    equals "$(cat .flow/data/merged)" "$SECRET|u-app|db.local" "node env merged with the command's"
    not_contains "$OUT$ERR" "$SECRET" "-v output"
    no_secret_in_flow_dir
    # the fingerprint holds the references: a new value reruns nothing, a new reference does
    sed -i "s/$SECRET/another-SECRET-value/" conf/local/credentials.yml
    run_flow 0 run --explain
    contains "$ERR" "explain: shell is up to date"
    contains "$ERR" "explain: merged is up to date"
    grep -qF "another-SECRET-value" .flow/cache/state.json && { echo "state.json holds the secret"; return 1; }
    sed -i 's/u-\${credentials.db.user}/v-${credentials.db.user}/' pipeline.lua
    run_flow 0 run --explain
    contains "$ERR" "explain: merged runs: its command changed"
    contains "$ERR" "explain: shell is up to date"
    equals "$(cat .flow/data/merged)" "another-SECRET-value|v-app|db.local" "after the reference changed"
}

test_node_env_conflict_and_lua_step_are_errors() {
    write pipeline.lua <<'L'
local c = flow.command{ "true", env = { MODE = "a" } }
return pipeline{
  node{ command = c, env = { MODE = "b" }, name = "clash" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3: node: env MODE is set both by the node and by its command's env, to different values"
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() end, env = { MODE = "b" }, name = "lua" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:2: node: env = {...} is the environment of a command's process; this step runs a Lua function"
}

# One credential, reaching flow every way it can — from the environment through
# ${env:} in credentials.yml, in parameters.yml, on --params, in a Lua error
# message, in what a Lua step prints, on a command's stdout and stderr, in a
# value passed between steps, in the process environment — and not one copy
# of it anywhere under .flow/ (journal, run.json, logs, cache, state, data).
test_a_credential_planted_everywhere_is_nowhere_in_flow_files() {
    local secret=planted-CRED-7731
    write conf/base/credentials.yml <<'Y'
api:
  key: "${env:PLANTED_TOKEN}"
Y
    write conf/base/parameters.yml <<Y
token: "$secret"
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "lua_error", inputs = "params:token", outputs = "e",
        func = function(k) error("the service rejected " .. k) end },
  node{ name = "cli_param", inputs = "params:extra", outputs = "p",
        func = function(k) print("extra is " .. k) return #k end },
  node{ name = "printer", outputs = "v",
        func = function() print("token " .. os.getenv("PLANTED_TOKEN")) return "Bearer " .. os.getenv("PLANTED_TOKEN") end },
  node{ name = "use", inputs = "v", outputs = "n", func = function(v) return #v end },
  node{ name = "shell", outputs = { o = "shell_out" },
        command = "echo out $PLANTED_TOKEN; echo err $PLANTED_TOKEN >&2; echo done > ${outputs.o}" },
  node{ name = "with_cred", outputs = { o = "cred_out" },
        command = "echo key ${credentials.api.key}; echo ok > ${outputs.o}" },
  node{ name = "failing", command = "echo failing with $PLANTED_TOKEN >&2; exit 3" },
}
L
    PLANTED_TOKEN=$secret run_flow 1 run -k -v --params "extra=$secret"
    contains "$ERR" "the service rejected ***"
    # each way in did reach flow's files, masked
    contains "$(cat .flow/runs/*/logs/shell.log)" "out ***" "shell.log"
    contains "$(cat .flow/runs/*/logs/shell.log)" "err ***" "shell.log"
    contains "$(cat .flow/runs/*/logs/printer.log)" "token ***" "printer.log"
    contains "$(cat .flow/runs/*/journal.jsonl)" "the service rejected ***" "the journal"
    local hits
    hits=$(grep -rla -- "$secret" .flow || true)
    [ -z "$hits" ] || { echo "the credential is in:"; echo "$hits"; grep -ra -- "$secret" .flow | head; return 1; }
    # again, from the cache and a second run's state
    PLANTED_TOKEN=$secret run_flow 1 run -k --params "extra=$secret"
    hits=$(grep -rla -- "$secret" .flow || true)
    [ -z "$hits" ] || { echo "the credential is in (second run):"; echo "$hits"; return 1; }
}

# A credential's own variable wins over an env value of the same name (as it
# did before env values expanded references), and an env value that names a
# credential gets all of its references expanded.
test_credential_variables_win_over_env_values_of_the_same_name() {
    creds
    write conf/base/parameters.yml <<'Y'
host: db.local
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "printf '%s|%s' ${credentials.db.password} \"$URL\" > ${outputs.o}",
        env = { FLOW_CRED_DB_PASSWORD = "literal", URL = "u:${credentials.db.user}@${params.host}" },
        outputs = { o = "o" }, name = "shell" },
}
L
    run_flow 0 run
    equals "$(cat .flow/data/o)" "$SECRET|u:app@db.local" "the credential, and the whole env value"
    no_secret_in_flow_dir
}

# Where a credential was shown in clear: the message of a --params value that
# does not parse (the parse error quoted it before the credentials were
# masked), the REPL's echo of a result and of an error, and flow viz.
test_a_credential_is_masked_in_params_errors_the_repl_and_viz() {
    creds
    export DB_PW=Sup3rSecretPw
    write conf/local/credentials.yml <<Y
db:
  password: "$SECRET"
pw: \${env:DB_PW}
Y
    write conf/base/parameters.yml <<'Y'
dsn: "postgres://u:${env:DB_PW}@h/db"
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo ${params.dsn} > ${outputs.o}", outputs = { o = "o" }, name = "a" } }
L
    run_flow 2 run --params "msg=\"$SECRET"
    contains "$ERR" "unterminated quoted string"
    not_contains "$ERR" "$SECRET" "the --params error"
    printf 'params.dsn\nerror(params.dsn)\n' | "$FLOW" repl >stdout.txt 2>stderr.txt || true
    contains "$(cat stdout.txt)" '"postgres://u:***@h/db"'
    contains "$(cat stderr.txt)" "postgres://u:***@h/db"
    not_contains "$(cat stdout.txt stderr.txt)" "Sup3rSecretPw" "the REPL"
    run_flow 0 viz --format html -o viz.html
    run_flow 0 viz
    not_contains "$(cat viz.html) $OUT" "Sup3rSecretPw" "flow viz"
    unset DB_PW
}

# The script's top level runs before a run loads the configuration: a
# credential's variable read there with os.getenv was shown in clear in the
# error that stopped it, and by print.  The configuration of the command
# line's environment is loaded first now, so both are masked.
test_a_credential_read_by_the_scripts_top_level_is_masked() {
    export API_TOKEN=top-level-T0KEN-value
    write conf/prod/credentials.yml <<'Y'
api:
  token: ${env:API_TOKEN}
Y
    write pipeline.lua <<'L'
print("token " .. os.getenv("API_TOKEN"))
error("bad token " .. os.getenv("API_TOKEN"))
L
    for cmd in run list viz; do
        run_flow 2 $cmd --env prod
        contains "$ERR" "pipeline.lua:2: bad token ***"
        contains "$OUT" "token ***"
        not_contains "$OUT$ERR" "$API_TOKEN" "flow $cmd's output"
    done
    # a conf/ that does not load is reported as before: the script's error first
    echo 'api: [' > conf/prod/credentials.yml
    run_flow 2 run --env prod
    contains "$ERR" "pipeline.lua:2: bad token"
    unset API_TOKEN
}

# The tables flow prints (flow catalog list, flow list, flow runs, a
# sweep's results) and the --dry-run listing mask a credential's value as
# print does: a catalog path or a tag may hold one.
test_tables_mask_credentials() {
    creds
    write conf/base/catalog.yml <<Y
o:
  type: text
  path: data/$SECRET/o.txt
Y
    write pipeline.lua <<L
return pipeline{ node{ func = function() return "x" end, outputs = "o", name = "l", tags = { "$TOKEN" } } }
L
    run_flow 0 catalog list
    contains "$OUT" "data/***/o.txt"
    run_flow 0 list
    contains "$OUT" "***"
    run_flow 0 run -n
    run_flow 0 run
    run_flow 0 runs
    not_contains "$OUT$ERR" "$SECRET" "output"
    not_contains "$OUT$ERR" "$TOKEN" "output"
}

# A secret holding a quote or a '<', or longer than what is shown of a
# value, is masked where flow quotes, escapes or cuts text: flow config
# --explain, the REPL and flow viz masked after escaping ("hunt\"er…" was
# no longer the secret) or cutting (the first 300 bytes showed).
test_escaped_and_long_secrets_are_masked() {
    write conf/local/credentials.yml <<'Y'
db:
  password: 'hunt"er<2>secret'
  long: ${env:FLOW_TEST_LONG}
Y
    write conf/base/parameters.yml <<'Y'
note: 'hunt"er<2>secret'
long: ${env:FLOW_TEST_LONG}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = [[echo 'hunt"er<2>secret' > ${outputs.o}]], outputs = "o", name = "leak" } }
L
    export FLOW_TEST_LONG=$(head -c 600 /dev/zero | tr '\0' k)
    run_flow 0 config --explain note
    local all="$OUT$ERR"
    run_flow 0 config --explain long
    all="$all$OUT$ERR"
    printf 'params\nparams.long\nstep("leak").command\n' | "$FLOW" repl >repl.txt 2>&1
    run_flow 0 viz --format html
    all="$all$(cat repl.txt)$OUT$ERR"
    not_contains "$all" 'hunt' "what flow printed"
    not_contains "$all" 'kkkkkkkkkkkkkkkk' "what flow printed"
    contains "$(cat repl.txt)" '"***"'
    unset FLOW_TEST_LONG
}
