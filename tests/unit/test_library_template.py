"""The bundled models carry Ollama's library Modelfile for their family, and a chat renders with it
as a real Ollama 0.32.15 rendered it: the library TEMPLATE (a Go template) and SYSTEM of recording 71,
executed by utils/go_template.py through Ollama's template values (utils/embedded/http/ollama_template.py),
give recording 26's `_debug_render_only` prompt (tools and a tool result) byte for byte, and 09's.
The Go template semantics these rely on are checked on small templates of their own."""

from __future__ import annotations

import pytest

from tests.support.recorded import load
from utils.embedded.http.ollama_template import collate, render
from utils.embedded.store.models import ModelStore
from utils.go_template import GoTemplateError, Stringer, Struct, execute, go_print

LIBRARY = load("71-show-qwen2.5-coder-library-modelfile").json()


@pytest.fixture
def store(tmp_path):
    return ModelStore(tmp_path)


@pytest.mark.parametrize("name", ["qwen2.5-coder:1.5b", "qwen2.5-coder:0.5b"])
def test_the_bundled_qwen_models_carry_the_library_template_and_system(store, name):
    spec = store.spec(name)
    assert (spec.template, spec.system, spec.parameters) == (LIBRARY["template"], LIBRARY["system"], {})


def test_the_draft_smollm2_keeps_its_gguf_template(store):
    """No recording of the Ollama library's smollm2 Modelfile: it renders with its GGUF's template."""
    assert (store.spec("smollm2:135m").template, store.spec("smollm2:135m").system) == (None, "")


def rendered(name: str) -> tuple[str, str]:
    exchange = load(name)
    request = exchange.request
    prompt = render(LIBRARY["template"], LIBRARY["system"], request["messages"], request.get("tools"), None)
    return prompt, exchange.json()["_debug_info"]["rendered_template"]


def test_a_tool_chat_renders_as_ollama_rendered_it_byte_for_byte():
    """26: the tools printed as Ollama's Go structs, the earlier call in <tool_call>, the result."""
    got, recorded = rendered("26-chat-tools-render-only")
    assert got == recorded


def test_a_plain_chat_gets_the_library_system_prompt():
    got, recorded = rendered("09-chat-debug-render-only")
    assert got == recorded


def test_a_system_message_replaces_the_library_one_and_later_ones_join_it():
    """Ollama's collate: every system text in `.System`, joined by a blank line; the Modelfile's
    SYSTEM only where the chat begins otherwise."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "system", "content": "# Environment"}, {"role": "user", "content": "Go"}]
    prompt = render(LIBRARY["template"], LIBRARY["system"], messages, None, None)
    assert prompt == ("<|im_start|>system\nBe brief.\n\n# Environment<|im_end|>\n"
                      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n")
    assert collate([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])[1] == [
        {"role": "user", "content": "a\n\nb"}]


def test_a_tool_schema_is_written_as_ollamas_types_keep_it():
    """Fields Ollama's ToolProperty lacks (title, default) are gone, a property's fields in its order,
    the properties' names sorted, `<` escaped as encoding/json does; an empty description stays."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "title": "F", "required": ["b"], "properties": {
            "b": {"title": "B", "description": "x < y", "type": ["integer"], "default": 3},
            "a": {"type": "object", "properties": {"z": {"type": "string"}, "y": {"type": "number"}}}}}}}
    template = "{{ range .Tools }}{{ .Function }}|{{ . }}{{ end }}{{ .Tools }}"
    prompt = render(template + "{{ .Messages }}", "", [{"role": "user", "content": "u"}], [tool], None)
    properties = ('{"a":{"type":"object","properties":{"z":{"type":"string"},"y":{"type":"number"}}},'
                  '"b":{"type":"integer","description":"x \\u003c y"}}')
    function = f'{{f  {{object <nil> <nil> [b] {properties}}}}}'
    written = f'[{{"type":"function","function":{{"name":"f","description":"","parameters":' \
              f'{{"type":"object","required":["b"],"properties":{properties}}}}}}}]'
    assert prompt.startswith(f"{function}|{{function <nil> {function}}}{written}")


def test_a_calls_arguments_are_json_in_key_order():
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": {"b": 1, "a": "<"}}}]}]
    template = "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}" \
               "{{ end }}"
    assert render(template, "", messages, None, None) == 'f{"a":"\\u003c","b":1}'


@pytest.mark.parametrize("template, data, expected", [
    ("{{ range $i, $m := .L }}{{ $i }}={{ $m }}{{ else }}none{{ end }}", {"L": ["a", "b"]}, "0=a1=b"),
    ("{{ range .L }}x{{ else }}none{{ end }}", {"L": []}, "none"),
    ("{{- $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}", {}, "2"),
    ("{{ if and .A (not .B) }}yes{{ else if .B }}b{{ end }}", {"A": 1, "B": ""}, "yes"),
    ("{{ or .A .B \"c\" }}|{{ and .A .B }}", {"A": "", "B": 0}, "c|"),
    ("{{ eq .R \"user\" \"tool\" }} {{ ne 1 2 }} {{ len .L }} {{ index .L 1 }} {{ slice .L 1 }}",
     {"R": "tool", "L": ["a", "b", "c"]}, "true true 3 b [b c]"),
    ("{{ $last := eq (len (slice $.L 1)) 2 -}} {{ $last }}", {"L": [1, 2, 3]}, "true"),
    ("a  {{- /* note */ -}}  b {{ .Missing }}", {}, "ab <no value>"),
    ("{{ with .S }}{{ .Name }}{{ end }}{{ with .N }}x{{ else }}y{{ end }}", {"S": Struct(Name="n"), "N": None}, "ny"),
    ("{{ .F }} {{ .G }} {{ .M }} {{ .T }}", {"F": 1e6, "G": 0.5, "M": {"b": 1, "a": [True]}, "T": Stringer([], "s")},
     "1e+06 0.5 map[a:[true] b:1] s"),
    ("{{ print \"a\\n\" 1 }}{{ \"x\" | print \"y\" }}", {}, "a\n1yx"),
])
def test_go_template_semantics(template, data, expected):
    assert execute(template, data) == expected


@pytest.mark.parametrize("template", ["{{ template \"x\" }}", "{{ nope 1 }}", "{{ if .A }}", "{{ .A.B }}"])
def test_what_cannot_be_executed_is_refused(template):
    with pytest.raises(GoTemplateError):
        execute(template, {"A": "text"})


def test_go_prints_a_nil_inside_a_struct_as_nil():
    assert go_print(Struct(A=None, B=[], C="")) == "{<nil> [] }"
