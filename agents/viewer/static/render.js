/* Rendering of one episode (turns, role spans, observations, reward, token mask).
 *
 * Every trajectory string is model or environment output and is untrusted: it only ever
 * reaches the page as a text node (el() appends strings with createTextNode; no innerHTML
 * anywhere), so text that looks like HTML is shown, never run. */
"use strict";

const CoaRender = (() => {
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const fmtReward = (r) => (r === null || r === undefined ? "—" : typeof r === "number" ? String(+r.toFixed(3)) : String(r));
  const rewardClass = (r) => (typeof r !== "number" ? "reward-none" : r >= 1 ? "reward-good" : r > 0 ? "reward-mid" : "reward-bad");
  const statusClass = (s) => {
    const head = String(s).split(":")[0];
    if (head === "ok") return "status-ok";
    if (head.startsWith("truncat")) return "status-trunc";
    if (head === "unreadable") return "status-unreadable";
    return "status-error";
  };
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const pretty = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

  function badge(text, cls) { return el("span", { class: `badge ${cls || ""}` }, text); }

  function keyValueTable(object, cls) {
    const body = Object.entries(object || {}).map(([k, v]) =>
      el("tr", null, el("th", null, k), el("td", null, el("pre", { class: "value" }, pretty(v)))));
    return el("table", { class: `kv ${cls || ""}` }, el("tbody", null, body));
  }

  function span(spanData) {
    const { kind, tag, text, closed } = spanData;
    // Newlines just inside a tag are layout, not content: the block already starts a line.
    const shown = text.replace(/^\n+/, "").replace(/\n+$/, "");
    if (kind === "text") {
      return shown.trim() ? el("div", { class: "span span-text" }, el("div", { class: "body" }, shown)) : null;
    }
    const label = (kind === "tool" ? `tool · ${tag}` : tag) + (closed ? "" : " (unclosed)");
    return el("div", { class: `span span-${kind} span-${tag}${closed ? "" : " unclosed"}`, "data-tag": tag },
      el("span", { class: "tag" }, label), el("div", { class: "body" }, shown));
  }

  function segment(seg, who) {
    const size = seg.tokens ? plural(seg.tokens, "token") : plural(seg.chars, "char");
    const loss = seg.kind === "generated" ? "trained" : "no loss";
    const head = el("div", { class: "seg-label" }, `${who} · ${size} · ${loss}`,
      seg.protocol_error ? badge(`protocol: ${seg.protocol_error.kind}`, "status-error") : null);
    if (seg.protocol_error) head.setAttribute("title", seg.protocol_error.message);
    return el("div", { class: `segment segment-${seg.kind}` }, head, seg.spans.map(span));
  }

  function turn(t) {
    return el("div", { class: "turn", "data-turn": t.turn },
      el("div", { class: "turn-head" }, `Turn ${t.turn}`),
      t.generated ? segment(t.generated, "model") : null,
      t.observations.map((o) => segment(o, "environment")));
  }

  function prompt(p) {
    const parts = p.messages.length
      ? p.messages.map((m) => el("div", { class: `message role-${m.role}` },
          el("span", { class: "tag" }, m.role), el("div", { class: "body" }, m.content)))
      : [el("div", { class: "message" }, el("div", { class: "body" }, p.text || "(no prompt recorded)"))];
    const count = p.messages.length ? plural(p.messages.length, "message") : "text";
    const question = p.messages.length ? p.messages[p.messages.length - 1].content : p.text;
    return [
      el("div", { class: "question" }, el("span", { class: "tag" }, "question"), el("div", { class: "body" }, question || "")),
      el("details", { class: "prompt" }, el("summary", null, `Full prompt (${count}${p.tokens ? `, ${plural(p.tokens, "token")}` : ""})`), parts),
    ];
  }

  function tokenBlock(block, decoded) {
    const who = block.kind === "prompt" ? "prompt" : block.kind === "generated" ? "model" : "environment";
    const chips = block.tokens.map(([id, piece, loss, logprob]) => {
      const title = `id ${id}${logprob === null ? "" : ` · logprob ${logprob}`} · ${loss ? "loss" : "no loss"}`;
      const text = decoded ? (piece === "" ? "·" : piece) : String(id);
      return el("span", { class: `tok ${loss ? "loss" : "noloss"}${decoded ? "" : " id"}`, title }, text);
    });
    const more = block.count > block.tokens.length ? ` (first ${block.tokens.length} shown)` : "";
    const label = el("div", { class: "seg-label" }, `${who} · ${plural(block.count, "token")}${more} · ${block.kind === "generated" ? "loss" : "no loss"}`);
    const body = el("div", { class: "toks" }, chips);
    if (block.kind === "prompt") {
      return el("details", { class: `tok-block tok-${block.kind}` }, el("summary", null, label), body);
    }
    return el("div", { class: `tok-block tok-${block.kind}` }, label, body);
  }

  function maskSection(payload, api) {
    const m = payload.mask;
    if (!m.has_ids) {
      return el("section", { class: "mask mask-text" }, el("h3", null, "Loss mask"),
        el("p", null, "This trajectory has no token ids (a text-only agent or a distilled file wrote it), so the mask is shown per segment: ",
          el("span", { class: "legend loss" }, `model text trains (${plural(m.generated_chars, "char")})`), " ",
          el("span", { class: "legend noloss" }, `observations do not (${plural(m.observation_chars, "char")})`), "."));
    }
    const body = el("div", { class: "mask-body muted" }, "loading tokens…");
    const details = el("details", { class: "mask" },
      el("summary", null, `Tokens and loss mask: prompt ${m.prompt_tokens} · generated ${m.generated_tokens} (loss) · observation ${m.observation_tokens} (no loss)`),
      body);
    let loaded = false;
    details.addEventListener("toggle", async () => {
      if (!details.open || loaded) return;
      loaded = true;
      try {
        const view = await api.tokens(payload.key);
        body.className = "mask-body";
        body.replaceChildren(
          el("div", { class: "legend-row" }, el("span", { class: "legend loss" }, "loss (generated)"),
            el("span", { class: "legend noloss" }, "no loss (prompt, observations)"),
            view.error ? el("span", { class: "warn" }, view.error) : null,
            view.tokenizer_error ? el("span", { class: "warn" }, `ids only: ${view.tokenizer_error}`) : null,
            el("span", { class: "muted" }, `${view.trained} of ${view.total} tokens train`)),
          ...view.blocks.map((b) => tokenBlock(b, view.decoded)));
      } catch (err) {
        body.replaceChildren(el("span", { class: "warn" }, err.message));
      }
    });
    return details;
  }

  function unreadable(payload) {
    return el("div", { class: "episode unreadable" },
      el("h2", null, `Line ${payload.line} is not a readable trajectory`),
      el("div", { class: "meta" }, payload.source),
      el("p", { class: "warn" }, payload.error),
      el("h3", null, "Its first bytes"), el("pre", { class: "raw" }, payload.raw));
  }

  function episode(payload, api, opts = {}) {
    if (payload.error) return unreadable(payload);
    const tools = Object.entries(payload.tool_calls || {}).map(([k, v]) => badge(`${k} × ${v}`, "tool"));
    const errors = Object.entries(payload.tool_errors || {}).map(([k, v]) => badge(`${k} error × ${v}`, "status-error"));
    const info = { ...payload.info };
    for (const name of ["terminated", "truncated", "seed"]) info[name] = payload[name];
    const unknown = payload.unknown_fields || {};
    return el("div", { class: `episode${opts.compact ? " compact" : ""}`, "data-key": payload.key },
      el("header", { class: "ep-head" },
        el("h2", null, payload.task_id),
        el("div", { class: "meta" }, `${payload.env_id} · sample ${payload.sample_index} · ${payload.source}`),
        el("div", { class: "badges" }, badge(`reward ${fmtReward(payload.reward)}`, rewardClass(payload.reward)),
          badge(payload.status, statusClass(payload.status)), badge(plural(payload.turns.length, "turn"), ""),
          tools, errors)),
      el("div", { class: "answer" }, el("span", { class: "tag" }, "answer"),
        el("span", { class: "body" }, payload.answer === null ? "(no answer)" : String(payload.answer))),
      el("section", { class: "reward" }, el("h3", null, "Reward breakdown"),
        payload.reward_details ? keyValueTable(payload.reward_details, "reward-details") : el("p", { class: "muted" }, "no reward_details recorded"),
        payload.reward_error ? el("p", { class: "warn" }, `reward error: ${pretty(payload.reward_error)}`) : null),
      prompt(payload.prompt),
      el("section", { class: "turns" }, payload.turns.map(turn)),
      maskSection(payload, api),
      el("details", { class: "info" }, el("summary", null, "Other fields"), keyValueTable(info)),
      Object.keys(unknown).length
        ? el("details", { class: "unknown", open: true }, el("summary", null, `Fields this viewer does not know (${Object.keys(unknown).length})`), keyValueTable(unknown))
        : null);
  }

  return { el, episode, fmtReward, rewardClass, statusClass, badge, plural };
})();
