# bash completion for flow (installed by `make install` into
# share/bash-completion/completions/flow).  Commands and flags come from the
# flow being completed (`flow --help`, `flow COMMAND --help`), so they never
# drift from it; --env from the project's conf/ directories; step names for
# --nodes, --from-nodes and --to-nodes from `flow list --format json`.

# The environments of the project in the current directory: conf/*, less base.
_flow_envs() {
    local d
    for d in conf/*/; do
        d=${d%/}; d=${d#conf/}
        [ -d "conf/$d" ] && [ "$d" != base ] && printf '%s\n' "$d"
    done
}

# The commands `flow --help` lists.
_flow_commands() {
    flow --help 2>/dev/null | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p'
}

# The step names of the pipeline (the script named on the line, else ./pipeline.lua).
_flow_steps() {
    local script=$1
    timeout 5 flow list ${script:+"$script"} --format json 2>/dev/null |
        sed -n 's/^[[:space:]]*"name":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p'
}

_flow() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd=${COMP_WORDS[1]} words i script
    COMPREPLY=()
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$(_flow_commands) help --help --version" -- "$cur"))
        return 0
    fi
    for ((i = 2; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in *.lua) script=${COMP_WORDS[i]} ;; esac
    done
    case $prev in
        -e|--env)
            COMPREPLY=($(compgen -W "$(_flow_envs)" -- "$cur")); return 0 ;;
        --nodes|--from-nodes|--to-nodes)
            # a comma-separated list: complete its last name
            local head=${cur%,*} last=${cur##*,} names n
            [ "$head" = "$cur" ] && head="" || head="$head,"
            names=$(_flow_steps "$script")
            COMPREPLY=()
            while IFS= read -r n; do
                [[ -n $n && $n == "$last"* ]] && COMPREPLY+=("$head$n")
            done <<<"$names"
            return 0 ;;
        --format)
            case $cmd in
                viz) words="dot mermaid html" ;;
                *) words="table json" ;;
            esac
            COMPREPLY=($(compgen -W "$words" -- "$cur")); return 0 ;;
        --goal) COMPREPLY=($(compgen -W "min max" -- "$cur")); return 0 ;;
        --progress) COMPREPLY=($(compgen -W "auto live plain" -- "$cur")); return 0 ;;
        --distributed) COMPREPLY=($(compgen -W "once local" -- "$cur")); return 0 ;;
        --early-stop) COMPREPLY=($(compgen -W "bandit median" -- "$cur")); return 0 ;;
        --conf) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
        -o|--output) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    esac
    if [[ $cur == -* ]]; then
        words=$(flow "$cmd" --help 2>/dev/null | grep -oE -- '(^|[ ,])--?[a-z][a-z-]*' | sed 's/^[ ,]*//' | sort -u)
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
        return 0
    fi
    case $cmd in
        catalog) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "list" -- "$cur")); return 0; } ;;
        azureml) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "whoami" -- "$cur")); return 0; } ;;
        runs) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "show" -d -- "$cur")); return 0; } ;;
        help) COMPREPLY=($(compgen -W "$(_flow_commands)" -- "$cur")); return 0 ;;
        logs) COMPREPLY=($(compgen -W "$(_flow_steps "")" -- "$cur")); return 0 ;;
    esac
    # a script: .lua files and directories
    COMPREPLY=($(compgen -f -X '!*.lua' -- "$cur") $(compgen -d -- "$cur"))
    return 0
}

complete -F _flow flow
