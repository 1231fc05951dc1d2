# t_build.sh — the Makefile itself: a missing package is named before anything
# compiles, and `make deps` (which installs the packages) does not need them;
# rules the stdlib must not spell twice.

test_missing_package_is_named() {
    command -v make >/dev/null || skip "no make"
    set +e
    make -s -C "$FLOW_ROOT" PKGS="lua5.4 flow-test-no-such-package" BUILD="$PWD/b" "$PWD/b/flow" >out.txt 2>&1
    rc=$?
    set -e
    out=$(cat out.txt)
    [ "$rc" -ne 0 ] || { echo "make succeeded without a package"; return 1; }
    contains "$out" "missing packages (pkg-config names): flow-test-no-such-package;"
    contains "$out" "make deps"
    not_contains "$out" "error:" "make's output (no compiler error)"
    [ ! -e b/lua/main.o ] || { echo "compiled although a package is missing"; return 1; }
}

test_deps_does_not_need_the_packages() {
    command -v make >/dev/null || skip "no make"
    out=$(make -n -C "$FLOW_ROOT" PKGS="flow-test-no-such-package" BUILD="$PWD/b" deps 2>&1)
    contains "$out" "tools/deps.sh"
    not_contains "$out" "missing packages"
}

test_stdlib_spells_the_parameter_rule_once() {
    # which inputs are parameters is the graph's rule (dag_is_param_input, in
    # Lua dag.is_param_input): a module that spells it again drifts from it
    found=$(cd "$FLOW_ROOT" && grep -nE '(match|find)\("\^params:"|[~=]= "parameters"|"parameters" [~=]=' \
        stdlib/flow.lua stdlib/flow/*.lua || true)
    equals "$found" "" "re-spellings of dag_is_param_input"
}
