"""The official `openai` Python client against `shardwire serve` (test_serve.c runs it).

Usage: python openai_client.py BASE_URL API_KEY MODEL PROMPT N_TOKENS

Prints one JSON object: the text of a chat completion and of a completion, both
plain and streamed (temperature 0, no other sampling field: OpenAI's semantics
make that greedy decoding), the usage of each, the finish reasons, the text of a
greedy chat with n-gram speculation asked for through the "shardwire" extension,
of one with llama.cpp's "repeat_penalty" 1.1 and one with frequency_penalty 0
(OpenAI's default, no effect), and the exception class names the client raised
for a wrong key, a wrong model and a frequency_penalty the gateway cannot honour.
"""
import json
import sys

import openai


def main() -> None:
    base, key, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    c = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
    out = {"version": openai.__version__}
    msgs = [{"role": "user", "content": prompt}]

    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0)
    out["chat"] = r.choices[0].message.content
    out["chat_finish"] = r.choices[0].finish_reason
    out["chat_usage"] = [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]
    out["chat_object"] = r.object

    parts, usage, finish, roles = [], None, None, []
    stream = c.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    for ch in stream:
        if ch.choices:
            d = ch.choices[0].delta
            if d.role:
                roles.append(d.role)
            parts.append(d.content or "")
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = [ch.usage.prompt_tokens, ch.usage.completion_tokens, ch.usage.total_tokens]
    out["chat_stream"] = "".join(parts)
    out["chat_stream_chunks"] = len(parts)
    out["chat_stream_finish"] = finish
    out["chat_stream_usage"] = usage
    out["chat_stream_roles"] = roles

    r = c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    out["completion"] = r.choices[0].text
    out["completion_usage"] = [r.usage.prompt_tokens, r.usage.completion_tokens]
    parts = [ch.choices[0].text for ch in
             c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0,
                                  stream=True) if ch.choices]
    out["completion_stream"] = "".join(parts)

    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                  extra_body={"shardwire": {"draft": "ngram", "draft_k": 4}})
    out["chat_ngram"] = r.choices[0].message.content
    out["chat_ngram_drafted"] = (r.model_extra or {}).get("shardwire", {}).get("drafted", -1)

    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                  extra_body={"repeat_penalty": 1.1})
    out["chat_repeat_penalty"] = r.choices[0].message.content
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                  frequency_penalty=0, presence_penalty=0)
    out["chat_zero_penalties"] = r.choices[0].message.content
    try:
        c.chat.completions.create(model=model, messages=msgs, max_tokens=2, frequency_penalty=0.5)
        out["frequency_penalty"] = "no error"
    except openai.APIError as e:
        out["frequency_penalty"] = type(e).__name__
    try:
        openai.OpenAI(base_url=base + "/v1", api_key="wrong-key-0123456789", max_retries=0) \
            .chat.completions.create(model=model, messages=msgs, max_tokens=2)
        out["wrong_key"] = "no error"
    except openai.APIError as e:
        out["wrong_key"] = type(e).__name__
    try:
        c.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=2)
        out["wrong_model"] = "no error"
    except openai.APIError as e:
        out["wrong_model"] = type(e).__name__
    out["models"] = [m.id for m in c.models.list().data]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
