#!/usr/bin/env python3
"""Render chat conversations with tools through transformers, for sprout's template tests.

Writes tests/fixtures/chat_templates/renders.json: for each template and conversation,
the chat request as a client sends it to /v1/chat/completions (`request`: messages in
OpenAI's shape, tool calls' arguments as JSON strings, content null beside tool calls),
what sprout hands the template for it (`messages`, `tools`, `add_generation_prompt`,
`continue_final_message`, `kwargs`: vLLM's conversion, which sprout's server makes too:
null content as "", arguments parsed from their JSON string, each tool as vLLM's
ChatCompletionToolsParam.model_dump() writes it, description and parameters null when not
given), and `text`: transformers' `apply_chat_template(messages, tools=...,
add_generation_prompt=..., continue_final_message=..., **kwargs, tokenize=False)`.

The templates (tests/fixtures/chat_templates/):
  qwen2.5-7b-instruct.jinja, qwen3-0.6b.jinja, llama-3.2-3b-instruct.jinja: the model
      vendors' chat templates of Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-0.6B and
      meta-llama/Llama-3.2-3B-Instruct, copied unchanged from the llama-cpp-python 0.3.36
      sdist on PyPI (llama_cpp_python-0.3.36.tar.gz, sha256 832db069...c2e,
      vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja,
      Qwen-Qwen3-0.6B.jinja, meta-llama-Llama-3.2-3B-Instruct.jinja);
  qwen3.jinja: Qwen3's later template (tiny-qwen3's chat_template.jinja), already here.

The tokenizer is tests/fixtures/tiny-qwen3/tokenizer.json with each template set on it
(only the text is compared, so any tokenizer serves); bos_token and eos_token are the
family's own texts, recorded with each case.

Run with the fixtures venv (transformers 4.57.6, the version pinned here):
  /root/.cache/sprout/venv/bin/python scripts/make_template_fixtures.py
"""

import copy
import json
import sys
from pathlib import Path

import transformers
from transformers import PreTrainedTokenizerFast

PINNED = "4.57.6"
REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "tests" / "fixtures" / "chat_templates"
TOKENIZER = REPO / "tests" / "fixtures" / "tiny-qwen3" / "tokenizer.json"

QWEN = ("<|endoftext|>", "<|im_end|>")
LLAMA = ("<|begin_of_text|>", "<|eot_id|>")
FAMILIES = {
    "qwen2.5-7b-instruct.jinja": QWEN,
    "qwen3-0.6b.jinja": QWEN,
    "qwen3.jinja": QWEN,
    "llama-3.2-3b-instruct.jinja": LLAMA,
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city, in °C or °F.",
        # Keys out of alphabetical order, a float, a nested schema: the order and the
        # numbers must print as the client wrote them.
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "A city, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "precision": {"type": "number", "minimum": 0.5, "default": 1e-05},
            },
            "required": ["city"],
        },
    },
}
# No description or parameters: vLLM hands the template both as null.
CLOCK = {"type": "function", "function": {"name": "now"}}


def user(text):
    return {"role": "user", "content": text}


def call(name, arguments, id="call_1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations(llama):
    """(name, request body) pairs: the request fields sprout reads for rendering."""
    system = {"role": "system", "content": "You are a careful assistant."}
    episode = [
        system,
        user("What is the weather in Paris?"),
        {"role": "assistant", "content": None,
         "tool_calls": [call("get_weather", '{"city": "Paris", "unit": "celsius", "precision": 1e21}')]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": '{"temp": 22.0, "sky": "sunny\nwarm", "note": "ünïcode \\"quoted\\""}'},
        {"role": "assistant", "content": "It is 22 °C and sunny in Paris."},
        user("Thanks! And in Oslo?"),
    ]
    out = [
        ("plain", {"messages": [user("Hi there")]}),
        ("system_and_tools", {"messages": [system, user("Weather in Rome?")],
                              "tools": [WEATHER, CLOCK]}),
        ("tool_episode", {"messages": episode, "tools": [WEATHER]}),
        ("tool_episode_tool_choice_none", {"messages": episode, "tools": [WEATHER],
                                           "tool_choice": "none"}),
        ("reasoning_earlier_turn", {"messages": [
            user("What is 2+2?"),
            {"role": "assistant", "content": "4", "reasoning_content": "2 plus 2 is 4."},
            user("And 3+3?"),
        ]}),
        ("reasoning_in_the_tool_turn", {"messages": [
            user("Weather in Oslo?"),
            {"role": "assistant", "content": "",
             "reasoning_content": "I should call the tool.",
             "tool_calls": [call("get_weather", '{"city": "Oslo"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": "-3"},
        ], "tools": [WEATHER]}),
        ("thinking_off", {"messages": [user("Hi")],
                          "chat_template_kwargs": {"enable_thinking": False}}),
        ("thinking_on", {"messages": [user("Hi")],
                         "chat_template_kwargs": {"enable_thinking": True}}),
        ("no_generation_prompt", {"messages": [user("Hi"), {"role": "assistant", "content": "Hello!"}],
                                  "add_generation_prompt": False}),
        ("continue_final_message", {"messages": [user("Count to three."),
                                                 {"role": "assistant", "content": "One, two,"}],
                                    "add_generation_prompt": False,
                                    "continue_final_message": True}),
    ]
    if not llama:
        # Two calls in one turn, one with empty arguments (vLLM makes them {}): Llama 3.2's
        # template takes one call a turn.
        out.append(("parallel_calls", {"messages": [
            user("Weather in Rome and the time?"),
            {"role": "assistant", "content": "Checking both.",
             "tool_calls": [call("get_weather", '{"city": "Rome"}', "a"), call("now", "", "b")]},
            {"role": "tool", "tool_call_id": "a", "content": "18"},
            {"role": "tool", "tool_call_id": "b", "content": "12:00"},
        ], "tools": [WEATHER, CLOCK]}))
    if llama:
        for _, body in out:
            body.setdefault("chat_template_kwargs", {})["date_string"] = "15 Mar 2025"
    return out


def tool_dict(tool):
    """A tool as vLLM's ChatCompletionToolsParam.model_dump() writes it."""
    function = tool["function"]
    return {"type": "function", "function": {
        "name": function["name"],
        "description": function.get("description"),
        "parameters": function.get("parameters"),
    }}


def template_message(message):
    """A request message as vLLM hands it to the template (and sprout's Message holds it)."""
    out = {"role": message["role"], "content": message.get("content") or ""}
    for key in ("name", "tool_call_id", "reasoning_content"):
        if message.get(key) is not None:
            out[key] = message[key]
    if message.get("tool_calls") is not None:
        calls = []
        for c in message["tool_calls"]:
            arguments = c["function"]["arguments"]
            calls.append({"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": json.loads(arguments) if arguments else {},
            }})
        out["tool_calls"] = calls
    return out


def main():
    if transformers.__version__ != PINNED:
        print(f"warning: transformers {transformers.__version__}, not the pinned {PINNED}",
              file=sys.stderr)
    cases = []
    for template, (bos, eos) in FAMILIES.items():
        source = (TEMPLATES / template).read_text(encoding="utf-8")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), bos_token=bos, eos_token=eos)
        tok.chat_template = source
        for name, body in conversations(template.startswith("llama")):
            messages = [template_message(m) for m in body["messages"]]
            tools = [tool_dict(t) for t in body["tools"]] if "tools" in body else None
            add = body.get("add_generation_prompt", True)
            cont = body.get("continue_final_message", False)
            kwargs = body.get("chat_template_kwargs", {})
            text = tok.apply_chat_template(
                copy.deepcopy(messages), tools=copy.deepcopy(tools), add_generation_prompt=add,
                continue_final_message=cont, tokenize=False, **kwargs)
            cases.append({
                "template": template, "name": name, "bos_token": bos, "eos_token": eos,
                "request": body, "messages": messages, "tools": tools,
                "add_generation_prompt": add, "continue_final_message": cont,
                "kwargs": kwargs, "text": text,
            })
    out = TEMPLATES / "renders.json"
    document = {"transformers": transformers.__version__, "cases": cases}
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} renders to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
