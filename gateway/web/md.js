// shardwire's web page: Markdown for the model's replies, written for this page (no library).
//
// A reply is parsed into blocks (fenced code, headings, lists, quotes, rules,
// paragraphs) and inline spans (code, bold, italic, links) and built as DOM
// nodes whose text is only ever set as textContent: nothing the model writes
// is parsed as HTML. A code fence that is still open (the reply is streaming)
// is shown as a code block already. Code blocks get a language label, a Copy
// button and a small highlighter (comments, strings, numbers, keywords) for the
// languages models write most; a language it does not know stays plain.
"use strict";
window.swMarkdown = (() => {
  const KEYWORDS = {
    c: "auto break case char const continue default do double else enum extern float for goto if " +
      "inline int long register return short signed sizeof static struct switch typedef union " +
      "unsigned void volatile while bool true false NULL size_t uint8_t uint32_t int64_t " +
      "class public private protected virtual template typename namespace using new delete " +
      "this nullptr std include define",
    py: "and as assert async await break class continue def del elif else except False finally " +
      "for from global if import in is lambda None nonlocal not or pass raise return True try " +
      "while with yield self print len range",
    js: "async await break case catch class const continue debugger default delete do else export " +
      "extends false finally for function if import in instanceof let new null return super " +
      "switch this throw true try typeof undefined var void while with yield interface type",
    sh: "if then else elif fi for while do done case esac in function return export local set " +
      "echo cd exit source read shift",
    rust: "as break const continue crate else enum extern false fn for if impl in let loop match " +
      "mod move mut pub ref return self Self static struct super trait true type unsafe use " +
      "where while Some None Ok Err",
    go: "break case chan const continue default defer else fallthrough for func go goto if import " +
      "interface map package range return select struct switch type var nil true false",
    sql: "select from where insert into values update set delete create table drop alter and or " +
      "not null join left right inner outer on group by order having limit as distinct",
  };
  const ALIASES = {
    c: "c", h: "c", cpp: "c", "c++": "c", cc: "c", cxx: "c", hpp: "c", java: "c", cs: "c",
    csharp: "c", cuda: "c", cu: "c", python: "py", py: "py", python3: "py",
    javascript: "js", js: "js", ts: "js", typescript: "js", jsx: "js", tsx: "js", json: "js",
    sh: "sh", bash: "sh", shell: "sh", zsh: "sh", console: "sh",
    rust: "rust", rs: "rust", go: "go", golang: "go", sql: "sql",
  };
  const sets = {};
  for (const [k, v] of Object.entries(KEYWORDS)) sets[k] = new Set(v.split(" "));

  // Comments per language family, then strings, numbers and words.
  const COMMENT = { c: /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)/y, js: /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)/y,
    rust: /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)/y, go: /\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)/y,
    py: /#[^\n]*/y, sh: /#[^\n]*/y, sql: /--[^\n]*/y };
  const STRING = /"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|`(?:[^`\\]|\\.)*`?/y;
  const NUMBER = /\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)[uUlLfF]*\b/y;
  const WORD = /[A-Za-z_][A-Za-z0-9_]*/y;

  function span(parent, cls, text) {
    const s = document.createElement("span");
    s.className = cls;
    s.textContent = text;
    parent.appendChild(s);
  }

  // Fills code (a <code>) with text, its tokens in spans; returns the number of spans.
  function highlight(code, text, lang) {
    const fam = ALIASES[(lang || "").toLowerCase()];
    if (!fam) {
      code.textContent = text;
      return 0;
    }
    const kw = sets[fam];
    let plain = "";
    let n = 0;
    const flush = () => {
      if (plain) code.appendChild(document.createTextNode(plain));
      plain = "";
    };
    for (let i = 0; i < text.length;) {
      let m = null;
      let cls = "";
      for (const [re, c] of [[COMMENT[fam], "tok-com"], [STRING, "tok-str"], [NUMBER, "tok-num"],
        [WORD, "tok-kw"]]) {
        re.lastIndex = i;
        m = re.exec(text);
        if (m && m[0].length) {
          cls = c;
          break;
        }
        m = null;
      }
      if (!m) {
        plain += text[i++];
        continue;
      }
      if (cls === "tok-kw" && !kw.has(fam === "sql" ? m[0].toLowerCase() : m[0])) {
        plain += m[0];
      } else {
        flush();
        span(code, cls, m[0]);
        n++;
      }
      i += m[0].length;
    }
    flush();
    return n;
  }

  // Copies text: the Clipboard API where the page may use it (a secure context: TLS or
  // localhost), else a selected textarea and execCommand (a gateway on another machine).
  async function copyText(text) {
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (err) {
      /* falls back below */
    }
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "offscreen";
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (err) {
      ok = false;
    }
    ta.remove();
    return ok;
  }

  function codeBlock(parent, text, lang) {
    const box = document.createElement("div");
    box.className = "code";
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const label = document.createElement("span");
    label.textContent = lang || "code";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy";
    btn.textContent = "Copy";
    btn.addEventListener("click", async () => {
      const ok = await copyText(text);
      btn.textContent = ok ? "Copied" : "Select and copy";
      btn.dataset.copied = ok ? "1" : "";
      document.body.dataset.copied = ok ? text : "";
      setTimeout(() => (btn.textContent = "Copy"), 1500);
    });
    bar.append(label, btn);
    const pre = document.createElement("pre");
    const code = document.createElement("code");
    box.dataset.tokens = String(highlight(code, text, lang));
    pre.appendChild(code);
    box.append(bar, pre);
    parent.appendChild(box);
  }

  // Inline spans: `code`, **bold**, *italic* / _italic_, [text](http(s) URL).
  const INLINE = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|__([^_\n]+)__|\*([^*\s][^*\n]*)\*|\b_([^_\n]+)_\b|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g;

  function inline(parent, text) {
    let at = 0;
    for (const m of text.matchAll(INLINE)) { // a copy of the regex: the calls nest
      if (m.index > at) parent.appendChild(document.createTextNode(text.slice(at, m.index)));
      let e;
      if (m[1] !== undefined) {
        e = document.createElement("code");
        e.textContent = m[1];
      } else if (m[2] !== undefined || m[3] !== undefined) {
        e = document.createElement("strong");
        inline(e, m[2] !== undefined ? m[2] : m[3]);
      } else if (m[4] !== undefined || m[5] !== undefined) {
        e = document.createElement("em");
        inline(e, m[4] !== undefined ? m[4] : m[5]);
      } else {
        e = document.createElement("a");
        e.href = m[7];
        e.rel = "noopener noreferrer";
        e.target = "_blank";
        e.textContent = m[6];
      }
      parent.appendChild(e);
      at = m.index + m[0].length;
    }
    if (at < text.length) parent.appendChild(document.createTextNode(text.slice(at)));
  }

  const FENCE = /^ {0,3}(```+|~~~+)\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const BULLET = /^(\s*)[-*+]\s+(.*)$/;
  const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

  // Renders text into container (emptied first).
  function render(text, container) {
    container.textContent = "";
    const lines = text.split("\n");
    let para = [];
    const endPara = () => {
      if (!para.length) return;
      const p = document.createElement("p");
      para.forEach((l, i) => {
        if (i) p.appendChild(document.createElement("br"));
        inline(p, l);
      });
      container.appendChild(p);
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        endPara();
        const fence = m[1];
        const body = [];
        for (i++; i < lines.length && !lines[i].trimStart().startsWith(fence); i++) body.push(lines[i]);
        codeBlock(container, body.join("\n"), m[2]);
      } else if ((m = HEADING.exec(line))) {
        endPara();
        const h = document.createElement("h" + Math.min(m[1].length + 2, 6));
        inline(h, m[2]);
        container.appendChild(h);
      } else if (RULE.test(line)) {
        endPara();
        container.appendChild(document.createElement("hr"));
      } else if (BULLET.test(line) || ORDERED.test(line)) {
        endPara();
        const ordered = !BULLET.test(line);
        const list = document.createElement(ordered ? "ol" : "ul");
        if (ordered) list.start = parseInt(ORDERED.exec(line)[2], 10);
        for (; i < lines.length; i++) {
          const b = BULLET.exec(lines[i]);
          const o = ORDERED.exec(lines[i]);
          if ((ordered ? o : b)) {
            const li = document.createElement("li");
            inline(li, ordered ? o[3] : b[2]);
            list.appendChild(li);
          } else if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && list.lastChild) {
            list.lastChild.appendChild(document.createElement("br"));
            inline(list.lastChild, lines[i].trim());
          } else {
            i--;
            break;
          }
        }
        container.appendChild(list);
      } else if ((m = QUOTE.exec(line))) {
        endPara();
        const q = document.createElement("blockquote");
        const body = [m[1]];
        while (i + 1 < lines.length && (m = QUOTE.exec(lines[i + 1]))) {
          body.push(m[1]);
          i++;
        }
        render(body.join("\n"), q);
        container.appendChild(q);
      } else if (!line.trim()) {
        endPara();
      } else {
        para.push(line);
      }
    }
    endPara();
  }

  return { render, highlight, copyText };
})();
