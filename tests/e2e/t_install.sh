# t_install.sh — make install: the binary, the manual page (rendered by
# man-db without a warning, and listing every command and option that
# `flow COMMAND --help` does, and no other), bash and zsh completions (bash's
# driven as readline would; zsh's in an interactive zsh on a pseudo-terminal),
# and make uninstall.

COMMANDS="new run sweep list repl viz compile catalog config logs status runs cancel azureml clean"

# $PWD/bin/flow: the flow under test, for the completions to call
flow_on_path() {
    mkdir -p bin
    ln -sf "$FLOW" bin/flow
    export PATH="$PWD/bin:$PATH"
}

test_make_install_and_uninstall() {
    make -s -C "$FLOW_ROOT" install DESTDIR="$PWD/root" PREFIX=/usr INSTALL_BIN="$FLOW" >make.log 2>&1 ||
        { cat make.log; return 1; }
    for f in bin/flow share/man/man1/flow.1 share/bash-completion/completions/flow share/zsh/site-functions/_flow; do
        test -f "root/usr/$f" || { echo "make install did not install $f"; return 1; }
    done
    test -x root/usr/bin/flow
    contains "$(root/usr/bin/flow --version)" "flow "
    make -s -C "$FLOW_ROOT" uninstall DESTDIR="$PWD/root" PREFIX=/usr >make.log 2>&1 || { cat make.log; return 1; }
    equals "$(find root -type f | wc -l)" 0 "files left after make uninstall"
}

test_man_page_renders_and_matches_help() {
    warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$FLOW_ROOT/docs/flow.1" 2>&1 >man.txt)
    equals "$warnings" "" "man's warnings"
    contains "$(cat man.txt)" "flow — run machine-learning pipelines"
    # every command flow --help lists has its entry, and no other
    listed=$("$FLOW" --help | sed -nE 's/^  ([a-z]+)( [^ ]+)? +.*/\1/p' | sort | tr '\n' ' ')
    equals "$listed" "$(printf '%s\n' $COMMANDS help | sort | tr '\n' ' ')" "the commands flow --help lists"
    contains "$(cat man.txt)" "flow help [command]"
    for c in $COMMANDS; do
        grep -q "^     $c\b\|^     flow $c\b" man.txt || { echo "man page: no entry for '$c'"; return 1; }
        # its options: each --flag of `flow $c --help`'s option lines is in its section
        section=$(awk -v c="$c" '$0 ~ "^     " c "( |$)" {on=1; next} on && (/^     [a-z]/ || /^[A-Z]/) {exit} on' man.txt)
        for f in $("$FLOW" $c --help | grep -E '^ +-' | grep -oE -- '(^|[ ,])--[a-z][a-z-]*' | sed 's/^[ ,]*//' | sort -u); do
            [ "$f" = --help ] && continue
            contains "$section" "$f" "the man page's entry for '$c'"
        done
        for f in $(printf '%s\n' "$section" | grep -oE -- '(^|[ ,])--[a-z][a-z-]*' | sed 's/^[ ,]*//' | sort -u); do
            contains "$("$FLOW" $c --help)" "$f" "flow $c --help (the man page lists $f)"
        done
    done
}

# bash: COMP_WORDS/COMP_CWORD as readline sets them, COMPREPLY read back
complete_bash() {
    bash -c 'source "$1/completions/flow.bash"; shift
             COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _flow; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$FLOW_ROOT" "$@" | sort | tr '\n' ' '
}

test_bash_completion() {
    flow_on_path
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "a", name = "load" },
  node{ func = function(a) return a end, inputs = "a", outputs = "b", name = "train" },
  node{ func = function(a) return a end, inputs = "a", outputs = "c", name = "test" },
}
L
    mkdir -p conf/base conf/local conf/prod
    equals "$(complete_bash flow ru)" "run runs " "flow ru<TAB>"
    equals "$(complete_bash flow run --from-)" "--from-inputs --from-nodes " "flow run --from-<TAB>"
    equals "$(complete_bash flow run --env '')" "local prod " "flow run --env <TAB>"
    equals "$(complete_bash flow run --nodes t)" "test train " "flow run --nodes t<TAB>"
    equals "$(complete_bash flow run --nodes load,tr)" "load,train " "flow run --nodes load,tr<TAB>"
    equals "$(complete_bash flow viz --format '')" "dot html mermaid " "flow viz --format <TAB>"
    equals "$(complete_bash flow sweep --early)" "--early-stop " "flow sweep --early<TAB>"
    equals "$(complete_bash flow catalog '')" "list " "flow catalog <TAB>"
    equals "$(complete_bash flow run pipe)" "pipeline.lua " "flow run pipe<TAB>"
}

test_zsh_completion() {
    flow_on_path
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "a", name = "load" } }
L
    mkdir -p conf/base conf/staging
    zsh -n "$FLOW_ROOT/completions/_flow"
    out=$(zsh -f -c 'autoload -U compinit && compinit -u -D; source "$1"; _flow_commands; echo ---; _flow_envs; echo ---;
                     _flow_steps; whence -w _flow' _ "$FLOW_ROOT/completions/_flow" 2>&1)
    contains "$out" "run:run a pipeline"
    contains "$out" "new:create a project"
    contains "$out" "---
staging
---
load
_flow: function"
    # and for real: an interactive zsh on a pseudo-terminal, Tab pressed
    mkdir -p fp && cp "$FLOW_ROOT/completions/_flow" fp/
    printf '%s\n' \
        "send PS1='%% '; fpath=($PWD/fp \$fpath); autoload -U compinit; compinit -u -D\n" 'expect % $' \
        'send flow compi\t' 'expect flow compile' 'send \x15' \
        'send flow run --ta\t' 'expect flow run --tags' 'send \x15' \
        'send flow run --nodes lo\t' 'expect --nodes load' 'send \x15' \
        'send flow run --env st\t' 'expect --env staging' 'send \x15exit\n' 'exit 0' >steps.txt
    /usr/bin/python3 "$FLOW_ROOT/tests/e2e/pty_drive.py" steps.txt -- zsh -f -i >screen.txt 2>&1 ||
        { cat screen.txt; return 1; }
}
