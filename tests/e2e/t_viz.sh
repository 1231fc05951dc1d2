# t_viz.sh — flow viz: the pipeline as Graphviz DOT (checked by Debian's
# graphviz, `dot -Tsvg`) and as a Mermaid flowchart; namespaces as nested
# clusters, parameters as their own nodes, a run's states as colours.

viz_project() {
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: raw.txt}
Y
    echo data > raw.txt
    write conf/base/parameters.yml <<'Y'
k: 2
workers: 2
Y
    write pipeline.lua <<'L'
local function f(x) return x end
local train = distributed_job{ framework = "pytorch", num_nodes = "params:workers" }(function(x) return x end)
local inner = pipeline{ node{ func = f, inputs = { "rows", "params:k" }, outputs = "feat", name = "featurize" } }
return pipeline{
  node{ func = f, inputs = "raw", outputs = "rows", name = "load", tags = { "data", "io" } },
  pipeline{ pipeline{ inner, namespace = "inner", inputs = "rows", parameters = { "k" } }, namespace = "outer", inputs = "rows",
            parameters = { "k" } },
  node{ func = train, inputs = "outer.inner.feat", outputs = 'mo"del', name = "train" },
  node{ command = "echo ${params.k} > ${outputs.r}", inputs = { m = 'mo"del' }, outputs = { r = "report" },
        name = "report" },
}
L
}

test_dot_is_valid_graphviz_with_clusters_and_parameters() {
    viz_project
    run_flow 0 viz
    printf '%s\n' "$OUT" >p.dot
    dot -Tsvg p.dot >p.svg || { echo "dot rejected it:"; cat p.dot; return 1; }
    contains "$(cat p.svg)" "<svg"
    contains "$OUT" "digraph pipeline {"
    # namespaces: outer holds inner, inner holds its step and its dataset
    contains "$OUT" 'subgraph "cluster_outer" {'
    contains "$OUT" '    subgraph "cluster_outer.inner" {'
    contains "$OUT" 'label="outer.inner.featurize"'
    contains "$OUT" '[shape=ellipse, label="outer.inner.feat"]'
    # a catalog dataset is a cylinder, a memory one an ellipse; a quote is escaped
    contains "$OUT" '[shape=cylinder, label="raw"]'
    contains "$OUT" '[shape=ellipse, label="mo\"del"]'
    # parameters: their own cluster, dashed edges; a command's ${params.k} and
    # a distributed count are reads too
    contains "$OUT" 'subgraph "cluster_parameters" {'
    contains "$OUT" 'label="params:k"'
    contains "$OUT" 'label="params:workers"'
    equals "$(printf '%s\n' "$OUT" | grep -c 'style=dashed')" "3" "parameter edges"
    # tags, the distribution and where the step runs
    contains "$OUT" 'label="load\n#data #io"'
    contains "$OUT" 'label="train\nPyTorch 2 nodes x 1 process\nruns: local"'
    # written to a file (relative to where flow was started), atomically
    mkdir -p sub
    (cd sub && "$FLOW" viz ../pipeline.lua -o out.dot)
    equals "$(cat sub/out.dot)" "$OUT" "the file"
}

test_mermaid_flowchart() {
    viz_project
    run_flow 0 viz --format mermaid
    equals "$(printf '%s\n' "$OUT" | head -1)" "flowchart LR"
    contains "$OUT" '  subgraph ns1["outer"]'
    contains "$OUT" '    subgraph ns2["inner"]'
    contains "$OUT" '(["mo#quot;del"])'
    contains "$OUT" '[("raw")]'
    contains "$OUT" '["load<br/>#35;data #35;io"]'
    contains "$OUT" ' -.-> '
    # every subgraph is closed, every edge names declared nodes
    equals "$(printf '%s\n' "$OUT" | grep -c 'subgraph ')" "$(printf '%s\n' "$OUT" | grep -c '^ *end$')" "subgraph/end"
    for id in $(printf '%s\n' "$OUT" | grep -- '-->\|-.->' | tr -s ' ' | cut -d' ' -f2,4 | tr ' ' '\n' | sort -u); do
        printf '%s\n' "$OUT" | grep -q "^ *$id[\[(>]" || { echo "edge to undeclared node $id"; return 1; }
    done
    run_flow 2 viz --format svg
    contains "$ERR" "--format must be dot, mermaid or html, got 'svg'"
}

test_run_colours_steps_by_state() {
    viz_project
    sed -i 's/echo ${params.k} > ${outputs.r}/exit 3/' pipeline.lua
    run_flow 1 run
    run_flow 0 viz --run
    dot -Tsvg <<<"$OUT" >/dev/null
    contains "$OUT" 'fillcolor="#d4edda", color="#2e7d32", label="load\n#data #io\ndone ('
    contains "$OUT" 'fillcolor="#f8d7da", color="#c62828", label="report\nfailed ('
    # the latest run by a prefix of its id, and in Mermaid
    id=$(ls .flow/runs | grep -v latest | tail -1)
    run_flow 0 viz --run "${id:0:15}" --format mermaid
    contains "$OUT" "classDef done fill:#d4edda,stroke:#2e7d32"
    contains "$OUT" "classDef failed fill:#f8d7da,stroke:#c62828"
    contains "$OUT" "class s4 failed"
    run_flow 2 viz --run nosuchrun
    contains "$ERR" "--run: no run 'nosuchrun'"
}

# A run still going has no run.json: its journal says which step is running.
test_run_in_progress_shows_running_steps() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "touch ${outputs.a}", outputs = "a", name = "first" },
  node{ command = "sleep 30; touch ${outputs.b}", inputs = "a", outputs = "b", name = "slow" },
  node{ command = "touch ${outputs.c}", inputs = "b", outputs = "c", name = "last" },
}
L
    run_flow_bg run
    for _ in $(seq 100); do
        grep -q '"step_start","step":"slow"' .flow/runs/*/journal.jsonl 2>/dev/null && break
        sleep 0.1
    done
    "$FLOW" viz --run >viz.txt
    kill -INT "$FLOW_PID"; wait "$FLOW_PID" || true
    contains "$(cat viz.txt)" 'label="first\ndone ('
    contains "$(cat viz.txt)" 'label="slow\nrunning"'
    contains "$(cat viz.txt)" 'label="last\nnot in that run"'
}

# --format html: one self-contained page, checked in headless Chromium: every
# step drawn, a click's details (here through #step=), the tag filter and
# the parameters' switch; nothing on the console.
test_html_page_in_a_browser() {
    viz_project
    sed -i 's/echo ${params.k} > ${outputs.r}/echo reporting k=${params.k}; echo ${params.k} > ${outputs.r}/' pipeline.lua
    run_flow 0 run
    run_flow 0 viz --format html --run -o page.html
    if grep -Eq '(src|href)=|@import|url\(' page.html; then echo "the page loads something"; return 1; fi
    page_dom "file://$PWD/page.html#step=report"
    equals "$(printf '%s\n' "$DOM" | grep -o '<g class="node step[^"]*"' | wc -l)" "4" "steps drawn"
    equals "$(printf '%s\n' "$DOM" | grep -o '<g class="node step state-done' | wc -l)" "4" "steps done"
    contains "$DOM" '<h2>report</h2>'
    contains "$DOM" '<dt>in that run</dt><dd>done ('
    contains "$DOM" 'reporting k=2'
    contains "$DOM" '<dt>command</dt><dd><pre>echo reporting'
    contains "$DOM" '<g class="node step state-done selected" data-id="s4"'
    contains "$DOM" '<text x="' # labels drawn
    contains "$DOM" '<g class="namespace">'
    page_dom "file://$PWD/page.html#tag=data"
    equals "$(printf '%s\n' "$DOM" | grep -o '<g class="node step state-done dimmed"' | wc -l)" "3" "steps without the tag"
    contains "$DOM" '<option value="data">data</option>'
    page_dom "file://$PWD/page.html#params=off"
    equals "$(printf '%s\n' "$DOM" | grep -o '<g class="node param hidden"' | wc -l)" "2" "hidden parameters"
    # a name that could end the page's script, or be markup, stays text
    sed -i 's/name = "load"/name = "load<\/script><b>x"/' pipeline.lua
    run_flow 0 viz --format html -o page.html
    page_dom "file://$PWD/page.html#step=load</script><b>x"
    contains "$DOM" '<h2>load&lt;/script&gt;&lt;b&gt;x</h2>'
    not_contains "$DOM" '<b>x'
    # a name with & and = opens from the address (it was split after its
    # decoding), and a long one of many-byte characters is cut between them
    sed -i 's/name = "load<\/script><b>x"/name = "R\&D=1"/' pipeline.lua
    sed -i 's/name = "report"/name = "ééééééééééééééééééééééééééééé"/' pipeline.lua
    run_flow 0 viz --format html -o page.html
    python3 -c 'open("page.html", encoding="utf-8").read()' || { echo "the page is not UTF-8"; return 1; }
    page_dom "file://$PWD/page.html#step=R%26D%3D1"
    contains "$DOM" '<h2>R&amp;D=1</h2>'
}
