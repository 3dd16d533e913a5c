"""The tool-call tag of a chat template (utils/tool_calls.py tool_tag, utils/chat_templates.py):
Ollama's parseTag (tools/template.go) on Go templates, its own TestParseTag cases first, then the
templates of the recordings and library-style ones; and the same reading of Jinja templates."""

from __future__ import annotations

import json

import pytest

from tests.support.recorded import RECORDED
from utils.chat_templates import go_tag
from utils.tool_calls import tool_tag

CALL = '{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}'
# tools/template_test.go TestParseTag, case for case.
PARSE_TAG_CASES = [
    ("", "{"),
    ("{{if .ToolCalls}}{{end}}", "{"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}{{ . }}{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}```json\n{{end}}", "```json"),
    ("{{if .ToolCalls}}[{{range .ToolCalls}}{{ . }}{{end}}]{{end}}", "["),
    ("{{if .ToolCalls}}\n [ {{range .ToolCalls}}{{ . }}{{end}}]{{end}}", "["),
    ("{{if .ToolCalls}}{{range .ToolCalls}}{{ . }}{{end}}]{{end}}", "{"),
    ("{{if .ToolCalls}} {{range .ToolCalls}}{{ . }}{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}\n{{ . }}\n{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}" + CALL + "{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}\n" + CALL + "{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}\r\n" + CALL + "{{end}}{{end}}", "{"),
    ("{{if .ToolCalls}}\n{{range .ToolCalls}}\n" + CALL + "\r\n{{end}}\r\n{{end}}", "{"),
    ("{{if .ToolCalls}}<|tool▁calls▁begin|>{{range .ToolCalls}}<|tool▁call▁begin|>functionget_current_weather\n"
     "```json\n{\"location\": \"Tokyo\"}\n```<|tool▁call▁end|>\n{{end}}<|tool▁calls▁end|>{{end}}",
     "<|tool▁calls▁begin|>"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}<tool_call>" + CALL + "</tool_call>{{end}}{{end}}", "<tool_call>"),
    ("{{if .ToolCalls}}\n{{range .ToolCalls}}<tool_call>" + CALL + "</tool_call>{{end}}{{end}}", "<tool_call>"),
    ("{{if .ToolCalls}}{{range .ToolCalls}}<tool_call>" + CALL + "<tool_call>{{end}}{{end}}", "<tool_call>"),
    ("{{if .ToolCalls}}First text{{if .Something}}inner{{end}}Second text{{end}}", "First text"),
    ("{{if .ToolCalls}}Action: ```json{{end}}", "Action: ```json"),
    ("{{if .ToolCalls}}functools[{{end}}", "functools["),
    ("{{if .ToolCalls}}[TOOL_CALL] [{{end}}", "[TOOL_CALL] ["),
    ("{{if .ToolCalls}}[TOOL_CALL][{{end}}", "[TOOL_CALL]["),
]


@pytest.mark.parametrize(("template", "tag"), PARSE_TAG_CASES)
def test_ollamas_parse_tag_cases(template, tag):
    assert tool_tag(template) == tag


# Ollama's library template for qwen2.5-coder, as recording 26 shows it rendered (its tool-call part).
QWEN_LIBRARY = """{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools>:
<tools>
{{- range .Tools }}
{"type": "function", "function": {{ .Function }}}
{{- end }}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> with \
NO other text. Do not include any backticks or ```json.
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}{{ .Prompt }}{{ end }}"""


def show(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.response").read_text())


def test_the_tags_of_the_recorded_and_library_templates():
    assert tool_tag(QWEN_LIBRARY) == "<tool_call>"  # nested in range / if / else if, after trim markers
    assert tool_tag(show("03-show-smollm2_135m")["template"]) == "{"  # a Go template without tool calls
    # The GGUF's Jinja template of both Qwen models (Ollama's /api/show of a model created FROM the GGUF).
    assert tool_tag(show("03-show-qwen2_5-coder_1_5b")["template"]) == "<tool_call>"
    assert tool_tag(show("03-show-qwen2_5-coder_0_5b")["template"]) == "<tool_call>"


@pytest.mark.parametrize(("template", "tag"), [
    # Ollama's command-r template: the text runs on to the "[" before the range.
    ('{{- if .Content }}{{ .Content }}\n{{- else if .ToolCalls }}\nAction: ```json\n[\n{{- range .ToolCalls }}\n'
     '    {\n        "tool_name": "{{ .Function.Name }}"}{{- end }}\n]```{{ end }}', "Action: ```json\n["),
    ("{{ if $.ToolCalls }}<tool_call>{{ end }}", "{"),  # a variable's field is not a FieldNode
    ("{{ if gt (len .ToolCalls) 0 }}<tool_call>{{ end }}", "{"),  # nor is one inside parentheses
    ("{{ if and .Tools .Message.ToolCalls }}<tool_call>{{ end }}", "<tool_call>"),
    ("{{ range .ToolCalls }}<tool_call>{{ end }}", "{"),  # only an `if` is looked for
    ("{{ if .ToolCalls }}{{ .Content }}<tool_call>{{ end }}", "{"),  # an action ends the search
    ('{{ if .ToolCalls }}{{/* "}} a quote */}}  \n[CALLS]{{ end }}', "[CALLS]"),  # comments are dropped
    ('{{ define "x" }}{{ if .ToolCalls }}<a>{{ end }}{{ end }}{{ if .ToolCalls }}<b>{{ end }}', "<b>"),
    ("{{ if .ToolCalls -}}  \n\t<call>  {{- end }}", "<call>"),
    ("{{ if .Foo }}{{ else if .ToolCalls }}`<t>`{{ end }}", "`<t>`"),  # else if: an if in the else list
    ("{{ if .ToolCalls }}<unclosed>", "{"),  # not a template text/template parses
])
def test_go_template_details(template, tag):
    assert go_tag(template) == tag


@pytest.mark.parametrize(("template", "tag"), [
    # Qwen3's: blank text first, then the tag in a string literal.
    ("{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}{%- if (loop.first and content) %}"
     "{{- '\\n' }}{%- endif %}{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
     "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{%- endfor %}{%- endif %}", "<tool_call>"),
    # Mistral's: the tag before the loop.
    ('{%- elif message.tool_calls is defined and message.tool_calls is not none %}{{- "[TOOL_CALLS][" }}'
     '{%- for tool_call in message.tool_calls %}{{- tool_call | tojson }}{%- endfor %}', "[TOOL_CALLS]["),
    # Llama 3.1's: the call is bare JSON, after an expression.
    ("{%- elif 'tool_calls' in message %}{%- if not message.tool_calls|length == 1 %}"
     "{{- raise_exception('one call only') }}{%- endif %}{{- '{\"name\": \"' + tool_call.name }}", "{"),
    ("{%- if message.role == 'assistant' and not message.tool_calls %}<|a|>{% endif %}", "{"),  # the negated branch
    ("{%- for m in messages %}{{ m.content }}{% endfor %}", "{"),  # no tool calls at all
    ("{# tool_calls #}{% for c in message.tool_calls %}\n<call>{{ c | tojson }}{% endfor %}", "<call>"),
])
def test_jinja_templates(template, tag):
    assert tool_tag(template) == tag
