"""Drives `shardwire serve`'s web page in a real headless Chromium (test_web.c runs it).

Usage: python web_driver.py BASE_URL API_KEY MODEL PROMPT N_TOKENS SHOT_DIR [CHROMIUM]

Chromium is started headless with the DevTools protocol on a port of its own
(read from DevToolsActivePort) and driven over its WebSocket with the
`websocket-client` package (scripts/dev/py_venv.sh installs it). Like a user, the
driver types into the page's fields and clicks its buttons, and reads what the
page shows. It prints one JSON object:

  settings_before_key  the side panel's sampling fields (id -> value) before any key
                     was accepted (empty: the page keeps no defaults of its own);
                     settings the same fields once the gateway's defaults came
                     (GET /v1/defaults), and repeat_penalty_max the repeat_penalty
                     field's upper bound from there
  key_refused        the message shown for a wrong key; key_stored_after_wrong
                     what sessionStorage held then (null); cluster_wrong_key the
                     HTTP status of /v1/cluster with that key
  chat_text          the reply to PROMPT (temperature 0, N_TOKENS tokens)
  chat_steps         how many different lengths the reply's text had while it
                     grew (a reply that arrives in one piece has 1), and
                     chat_span_ms the time from its first to its last growth
  chat_stats         the stats line under the reply
  stop_len_at_click, stop_len_after, stop_state
                     a long generation stopped with the Stop button
  nodes_before, nodes_after   the node table's rows (cells) before and after
                     one more generation, cluster_before / cluster_after the
                     cards' text, numbers_before / numbers_after the numbers read
                     off both (messages forwarded by the relay, tokens streamed,
                     generations, each node's messages in + out), chart_bars the
                     bars drawn; hops the hop table's rows (hop, the path that
                     carries it, its round trip)
  screenshots        the PNG files written into SHOT_DIR

Any failure to drive the page raises (exit 1) with what was seen.
"""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket


class Page:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def js(self, expr, await_promise=False):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                      awaitPromise=await_promise)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {expr[:120]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr, timeout_s, what):
        end = time.time() + timeout_s
        while time.time() < end:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.05)
        raise RuntimeError(f"timed out after {timeout_s} s waiting for {what} ({expr})")

    def shot(self, path):
        r = self.call("Page.captureScreenshot", format="png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        return path


def chromium_path(given):
    for c in ([given] if given else []) + ["chromium", "chromium-browser", "google-chrome"]:
        p = shutil.which(c)
        if p:
            return p
    raise SystemExit("web_driver: no chromium (scripts/deps.sh installs Debian's: SW_DEPS_EXTRA=chromium)")


def start_browser(binary, profile):
    """Starts chromium with everything it writes under the folder `profile`: its user data
    in profile/data, and its temporary files in profile/tmp (TMPDIR). Without the latter,
    chromium's singleton socket folder (/tmp/org.chromium.Chromium.XXXXXX) outlived a
    passing suite, out of tmp_check's sight."""
    data, tmp = os.path.join(profile, "data"), os.path.join(profile, "tmp")
    os.makedirs(data, exist_ok=True)
    os.makedirs(tmp, exist_ok=True)
    argv = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
            "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={data}", "--window-size=1280,900", "about:blank"]
    # its own process group: stop_browser ends every helper process it started
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ, TMPDIR=tmp))
    port_file = os.path.join(data, "DevToolsActivePort")
    end = time.time() + 60
    while time.time() < end:
        if proc.poll() is not None:
            stop_browser(proc, profile)
            raise SystemExit(f"web_driver: {binary} exited ({proc.returncode}) at start")
        try:
            with open(port_file) as f:
                port = int(f.readline().strip())
            break
        except (OSError, ValueError):
            time.sleep(0.1)
    else:
        stop_browser(proc, profile)
        raise SystemExit("web_driver: chromium did not open its DevTools port in 60 s")
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.load(r)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return proc, pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.1)
    stop_browser(proc, profile)
    raise SystemExit("web_driver: chromium has no page target")


def stop_browser(proc, profile):
    """Ends chromium and all its helpers, then removes its folder (user data and TMPDIR). A
    helper that outlives the main process (the network service) can write into the profile
    after a plain rmtree, which left a folder in /tmp (tmp_check caught it), so the group is
    waited for first."""
    def group_alive():
        try:
            os.killpg(proc.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    end = time.time() + 10
    while group_alive() and time.time() < end:
        if time.time() > end - 5:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for _ in range(50):
        shutil.rmtree(profile, ignore_errors=True)
        if not os.path.exists(profile):
            return
        time.sleep(0.1)
    print(f"web_driver: could not remove {profile}", file=sys.stderr)


def set_value(p, elem_id, value):
    """Types a value into a field as a user would: value, then input/change events."""
    p.js(f"(() => {{ const e = document.getElementById({json.dumps(elem_id)});"
         f" e.value = {json.dumps(str(value))};"
         " e.dispatchEvent(new Event('input', {bubbles: true}));"
         " e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()")


def click(p, elem_id):
    p.js(f"document.getElementById({json.dumps(elem_id)}).click()")


def cards(p):
    return p.js("""(() => { const o = {};
        for (const id of ['c-relay', 'c-relay-sub', 'c-sessions', 'c-rate', 'c-rate-sub',
                          'c-last-tps', 'c-last-sub', 'c-tpr', 'c-tpr-sub', 'c-updated'])
            o[id] = document.getElementById(id).textContent;
        o.polls = +document.body.dataset.clusterPolls || 0; return o; })()""")


def numbers(c, rows):
    """The numbers a user reads off the page: from the cards' text and the node table."""
    def grab(pattern, text):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else -1
    n = {"forwarded": grab(r"(\d+) forwarded", c["c-relay-sub"]),
         "streamed": grab(r"(\d+) tokens streamed", c["c-rate-sub"]),
         "generations": grab(r"(\d+) generations", c["c-rate-sub"])}
    for r in rows:
        m = re.fullmatch(r"(\d+) / (\d+)", r[6])
        n[r[0] + "_msgs"] = int(m.group(1)) + int(m.group(2)) if m else -1
    return n


SETTINGS = ["temperature", "top-p", "top-k", "min-p", "repeat-penalty", "max-tokens"]


def settings(p):
    """The side panel's sampling fields as the page shows them: id -> value."""
    return p.js(f"Object.fromEntries({json.dumps(SETTINGS)}"
                ".map(id => [id, document.getElementById(id).value]))")


def node_rows(p):
    return p.js("[...document.querySelectorAll('#nodes tbody tr')]"
                ".map(tr => [...tr.cells].map(td => td.textContent))")


# The last reply's stats (or error) line lies inside the messages' visible box.
IN_VIEW = """(() => { const box = document.getElementById('messages').getBoundingClientRect();
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    const r = m.querySelector('.stats').getBoundingClientRect();
    return r.height > 0 && r.bottom <= box.bottom + 1 && r.top >= box.top - 1; })()"""

LAST_STATE = "([...document.querySelectorAll('.msg.assistant')].pop() || {dataset: {}}).dataset.state"


def stored_chat(p):
    """The current chat as localStorage keeps it: its messages' roles."""
    return p.js("""(() => { const id = localStorage.getItem('shardwire-chat-current');
        const c = JSON.parse(localStorage.getItem('shardwire-chats') || '[]').find(x => x.id === id);
        return c ? c.convo.map(m => m.role) : null; })()""")


def reload(p):
    p.call("Page.reload")
    time.sleep(0.3)
    p.wait("document.readyState === 'complete' && document.body.dataset.authorized", 60,
           "the page after a reload")
    p.wait("document.body.dataset.defaults", 60, "the defaults after a reload")


def chat_part(p, out, prompt, shots):
    """Reload, regenerate, edit and a failed turn, after the first reply."""
    first = p.js("[...document.querySelectorAll('.msg.assistant')].pop().dataset.raw")
    # a reload keeps the conversation, the list of chats and the settings
    reload(p)
    out["reload_msgs"] = p.js("[...document.querySelectorAll('.msg')].map(m => m.classList[1])")
    out["reload_text_same"] = p.js("[...document.querySelectorAll('.msg.assistant')].pop()"
                                   ".dataset.raw") == first
    out["reload_chats"] = p.js("[...document.querySelectorAll('#chats li[data-chat]')].length")
    out["reload_settings"] = settings(p)
    out["reload_draft"] = p.js("document.getElementById('draft').value")
    # Regenerate: at temperature 0 the same reply again, in place of the first
    # (the new reply is told by its element, not by catching it while it streams: on a fast
    # machine its 32 tokens can come and go between two looks at the page)
    p.js("window.__first = [...document.querySelectorAll('.msg.assistant')].pop(); true")
    click(p, "regenerate")
    p.wait("(m => m && m !== window.__first && m.dataset.state === 'done')"
           "([...document.querySelectorAll('.msg.assistant')].pop())", 180,
           "the regenerated reply")
    out["regen_same"] = p.js("[...document.querySelectorAll('.msg.assistant')].pop()"
                             ".dataset.raw") == first
    out["regen_msgs"] = p.js("document.querySelectorAll('.msg').length")
    out["regen_stats_in_view"] = p.js(IN_VIEW)
    # a failed turn (max_tokens beyond the context: 400): marked, out of the conversation
    set_value(p, "max-tokens", "100000")
    set_value(p, "prompt", "Say hello.")
    click(p, "send")
    p.wait(f"{LAST_STATE} === 'error'", 60, "the failed turn")
    out["failed_line"] = p.js("[...document.querySelectorAll('.msg.assistant')].pop()"
                              ".querySelector('.stats').textContent")
    out["failed_marked"] = p.js("[...document.querySelectorAll('.msg')].filter("
                                "m => m.classList.contains('failed')).length")
    out["failed_stored"] = stored_chat(p)
    out["failed_prompt_back"] = p.js("document.getElementById('prompt').value")
    out["failed_in_view"] = p.js(IN_VIEW)
    out["screenshots"].append(p.shot(os.path.join(shots, "2b-failed-turn.png")))
    p.js("document.getElementById('prompt').value = ''")
    # Edit: the last message back into the composer, out of the conversation
    click(p, "edit-last")
    out["edit_prompt"] = p.js("document.getElementById('prompt').value")
    out["edit_msgs"] = p.js("document.querySelectorAll('.msg').length")
    out["edit_stored"] = stored_chat(p)


MARKDOWN = ("Here is **bold**, *italic* and `inline code`:\n\n"
            "```c\n#include <stdio.h>\nint main(void) {\n    printf(\"hello %d\\n\", 42); // greet\n"
            "    return 0;\n}\n```\n\n1. first\n2. second\n\n> a quote")


def markdown_part(p, out, shots):
    """A stored chat whose reply holds Markdown: rendered after a reload, code in a
    monospace font with a Copy button and highlighted tokens; the chat list switches."""
    click(p, "tab-chat")
    chat = {"id": "cmd", "title": "Markdown test", "updated": 1,
            "convo": [{"role": "user", "content": "Show me C."},
                      {"role": "assistant", "content": MARKDOWN, "stats": "stored"}]}
    p.js(f"""(() => {{ const l = JSON.parse(localStorage.getItem('shardwire-chats') || '[]');
        l.unshift({json.dumps(chat)}); localStorage.setItem('shardwire-chats', JSON.stringify(l));
        return true; }})()""")
    reload(p)
    out["chats_listed"] = p.js("[...document.querySelectorAll('#chats li[data-chat]')]"
                               ".map(li => li.dataset.chat)")
    p.js("document.querySelector('#chats li[data-chat=cmd] button.open').click()")
    p.wait("!!document.querySelector('.msg.assistant .code')", 60, "the Markdown reply")
    out["md"] = p.js("""(() => { const t = [...document.querySelectorAll('.msg.assistant .text')].pop();
        const pre = t.querySelector('.code pre code');
        return {strong: (t.querySelector('strong') || {}).textContent,
                em: (t.querySelector('em') || {}).textContent,
                inline_code: (t.querySelector('p code') || {}).textContent,
                code: pre.textContent, font: getComputedStyle(pre).fontFamily,
                tokens: +t.querySelector('.code').dataset.tokens,
                kinds: [...new Set([...pre.querySelectorAll('span')].map(s => s.className))].sort(),
                items: [...t.querySelectorAll('ol li')].map(li => li.textContent),
                quote: (t.querySelector('blockquote') || {}).textContent,
                fences: t.textContent.includes('```'), html: t.querySelectorAll('script').length}; })()""")
    # Copy puts the code on the clipboard (read back from it; headless Chromium lets a
    # focused page use the clipboard once permitted)
    p.call("Browser.grantPermissions", origin=p.js("location.origin"),
           permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
    p.call("Emulation.setFocusEmulationEnabled", enabled=True)
    p.js("document.querySelector('.msg.assistant .code .copy').click()")
    p.wait("document.body.dataset.copied !== undefined", 60, "the copy")
    out["copied"] = p.js("navigator.clipboard.readText()", await_promise=True)
    out["screenshots"].append(p.shot(os.path.join(shots, "5-markdown-1280.png")))
    # the selects show their whole option text
    out["selects_fit"] = p.js(SELECTS_FIT)


# Whether each select's chosen option fits its box (text width + room for the arrow).
SELECTS_FIT = """(() => { const c = document.createElement('canvas').getContext('2d');
    return Object.fromEntries(['model', 'draft'].map(id => { const s = document.getElementById(id);
        c.font = getComputedStyle(s).font;
        const w = c.measureText(s.options[s.selectedIndex].textContent).width;
        return [id, w + 24 <= s.clientWidth]; })); })()"""


def narrow_part(p, out, shots):
    """A phone's width (390 px): the chat takes the screen, the settings open over it."""
    p.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1,
           mobile=True)
    time.sleep(0.5)
    n = {}
    n["page_width"] = p.js("document.documentElement.scrollWidth")
    n["messages_width"] = p.js("document.getElementById('messages').getBoundingClientRect().width")
    n["prompt_width"] = p.js("document.getElementById('prompt').getBoundingClientRect().width")
    n["settings_hidden"] = p.js("getComputedStyle(document.getElementById('settings')).display")
    out["screenshots"].append(p.shot(os.path.join(shots, "6-chat-390.png")))
    click(p, "toggle-settings")
    time.sleep(0.3)
    n["settings_open"] = p.js("getComputedStyle(document.getElementById('settings')).display")
    n["selects_fit"] = p.js(SELECTS_FIT)
    out["screenshots"].append(p.shot(os.path.join(shots, "7-settings-390.png")))
    click(p, "toggle-settings")
    click(p, "tab-cluster")
    p.wait("document.body.dataset.clusterPolls >= 1", 60, "the cluster page")
    time.sleep(1.2)
    n["cluster_width"] = p.js("document.documentElement.scrollWidth")
    out["screenshots"].append(p.shot(os.path.join(shots, "8-cluster-390.png")))
    out["narrow"] = n


def main():
    base, key, model, prompt, n_tok, shots = sys.argv[1:7]
    binary = chromium_path(sys.argv[7] if len(sys.argv) > 7 else None)
    os.makedirs(shots, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="sw_web_chromium.")
    proc, ws_url = start_browser(binary, profile)
    out = {"chromium": subprocess.run([binary, "--version"], capture_output=True,
                                      text=True).stdout.strip(), "screenshots": []}
    try:
        p = Page(ws_url)
        p.call("Page.enable")
        p.call("Runtime.enable")
        p.call("Page.navigate", url=base + "/")
        p.wait("document.readyState === 'complete' && !!document.getElementById('key-dialog')",
               60, "the page to load")
        p.wait("!document.getElementById('key-dialog').hidden", 60, "the key dialog")
        out["settings_before_key"] = settings(p)

        # A wrong key is refused, and not kept.
        set_value(p, "key-input", "wrong-key-0123456789")
        click(p, "key-submit")
        out["key_refused"] = p.wait(
            "(t => t.startsWith('Refused') && t)(document.getElementById('key-error').textContent)",
            60, "the wrong key's refusal")
        out["key_dialog_after_wrong"] = p.js("!document.getElementById('key-dialog').hidden")
        out["key_stored_after_wrong"] = p.js("sessionStorage.getItem('shardwire-api-key')")
        out["cluster_wrong_key"] = p.js(
            "fetch('/v1/cluster', {headers: {Authorization: 'Bearer wrong-key-0123456789'}})"
            ".then(r => r.status)", await_promise=True)
        out["screenshots"].append(p.shot(os.path.join(shots, "1-key-refused.png")))

        # The right key: the dialog closes and the model list fills.
        set_value(p, "key-input", key)
        click(p, "key-submit")
        p.wait("document.getElementById('key-dialog').hidden && document.body.dataset.authorized",
               60, "the key to be accepted")
        out["key_stored"] = p.js("sessionStorage.getItem('shardwire-api-key')") == key
        p.wait("document.body.dataset.defaults", 60, "the gateway's defaults")
        out["settings"] = settings(p)
        out["repeat_penalty_max"] = p.js("document.getElementById('repeat-penalty').max")
        out["models"] = p.wait(
            f"(o => o.includes({json.dumps(model)}) && o)([...document.getElementById('model')"
            ".options].map(x => x.value))", 60, "the model list")

        # A message streams, piece by piece: every change of the reply's text is recorded.
        set_value(p, "temperature", "0")
        set_value(p, "max-tokens", n_tok)
        set_value(p, "draft", "none")  # one token per round trip: it streams token by token
        # what the page keeps: the fields the user set, not those still at the gateway's default
        out["kept_settings"] = p.js("Object.keys(JSON.parse(localStorage.getItem("
                                    "'shardwire-settings') || '{}'))")
        p.js("""window.__steps = []; new MutationObserver(() => {
                const t = [...document.querySelectorAll('.msg.assistant .text')].pop();
                if (t) window.__steps.push([performance.now(), t.textContent.length]);
            }).observe(document.getElementById('messages'),
                       {subtree: true, childList: true, characterData: true});""")
        set_value(p, "prompt", prompt)
        click(p, "send")
        p.wait("(m => m && m.dataset.state === 'done')"
               "([...document.querySelectorAll('.msg.assistant')].pop())", 180, "the reply")
        steps = p.js("window.__steps")
        lengths = sorted({n for _, n in steps if n > 0})
        grow = [t for t, n in steps if n > 0]
        out["chat_steps"] = len(lengths)
        out["chat_span_ms"] = (grow[-1] - grow[0]) if grow else 0
        out["chat_chunks"] = int(p.js("[...document.querySelectorAll('.msg.assistant')].pop()"
                                      ".dataset.chunks"))
        out["chat_text"] = p.js("[...document.querySelectorAll('.msg.assistant')].pop()"
                                ".dataset.raw")
        out["chat_stats"] = p.js("[...document.querySelectorAll('.msg.assistant .stats')]"
                                 ".pop().textContent")
        out["chat_stats_in_view"] = p.js(IN_VIEW)
        out["screenshots"].append(p.shot(os.path.join(shots, "2-chat.png")))
        chat_part(p, out, prompt, shots)

        # Stop: a long generation, stopped while it streams.
        click(p, "new-chat")
        set_value(p, "draft", "auto")
        set_value(p, "max-tokens", "1500")
        set_value(p, "prompt", "Count from 1 to 1000: 1, 2, 3,")
        click(p, "send")
        last_len = "[...document.querySelectorAll('.msg.assistant .text')].pop().textContent.length"
        p.wait(f"document.querySelector('.msg.assistant') && {last_len} > 40", 120,
               "the long reply to stream")
        out["stop_enabled"] = p.js("!document.getElementById('stop').disabled")
        click(p, "stop")
        out["stop_len_at_click"] = p.js(last_len)
        out["stop_state"] = p.wait("(m => m.dataset.state !== 'streaming' && m.dataset.state)"
                                   "([...document.querySelectorAll('.msg.assistant')].pop())", 60,
                                   "the stop")
        time.sleep(2)
        out["stop_len_after"] = p.js(last_len)
        out["stop_send_enabled"] = p.js("!document.getElementById('send').disabled")
        out["screenshots"].append(p.shot(os.path.join(shots, "3-stopped.png")))

        # The cluster page: its nodes, and numbers that move with one more generation.
        click(p, "tab-cluster")
        p.wait("document.querySelectorAll('#nodes tbody tr').length >= 2 && "
               "document.body.dataset.clusterPolls >= 2", 60, "the cluster page")
        out["nodes_before"] = node_rows(p)
        out["cluster_before"] = cards(p)
        out["more_status"] = p.js(
            "fetch('/v1/chat/completions', {method: 'POST', headers: {Authorization: 'Bearer ' + "
            "sessionStorage.getItem('shardwire-api-key'), 'Content-Type': 'application/json'}, "
            f"body: JSON.stringify({{model: {json.dumps(model)}, max_tokens: 24, temperature: 0, "
            "messages: [{role: 'user', content: 'Name three planets.'}]})}).then(r => r.status)",
            await_promise=True)
        # two updates that began after the generation ended (one may have been in flight)
        polls = p.js("+document.body.dataset.clusterPolls || 0")
        p.wait(f"document.body.dataset.clusterPolls >= {polls + 2}", 60, "two more updates")
        out["nodes_after"] = node_rows(p)
        out["hops"] = p.js("[...document.querySelectorAll('#hops tbody tr')]"
                           ".map(tr => [...tr.cells].map(td => td.textContent))")
        out["cluster_after"] = cards(p)
        out["numbers_before"] = numbers(out["cluster_before"], out["nodes_before"])
        out["numbers_after"] = numbers(out["cluster_after"], out["nodes_after"])
        out["chart_bars"] = int(p.js("document.getElementById('split-chart').dataset.bars || 0"))
        out["pipeline"] = p.js("[...document.querySelectorAll('#pipeline .seg')]"
                               ".map(s => s.textContent)")
        out["recent_rows"] = p.js("document.querySelectorAll('#recent tbody tr').length")
        out["cluster_model"] = p.js("document.getElementById('c-model').textContent")
        out["chart_axes"] = p.js("document.getElementById('split-chart').dataset.axes || ''")
        out["health_page"] = p.js("document.getElementById('health').dataset.status || ''")
        out["favicon_link"] = p.js("(document.querySelector('link[rel=icon]') || {}).href || ''")
        out["screenshots"].append(p.shot(os.path.join(shots, "4-cluster.png")))
        markdown_part(p, out, shots)
        narrow_part(p, out, shots)
    finally:
        stop_browser(proc, profile)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
