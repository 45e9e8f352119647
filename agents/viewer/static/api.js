/* Data sources of the viewer page.
 *
 * Served by `coa view`, the page asks the JSON API (agents/viewer/app.py), which pages and
 * filters on the server. Opened from a `coa view --export` file, it reads the episodes
 * embedded in <script type="application/json" id="coa-data"> and answers the same calls here,
 * with the same meaning as agents/viewer/query.py (EpisodeQuery, CompareQuery). */
"use strict";

const CoaApi = (() => {
  const splitKey = (key) => {
    const [run, file, row] = String(key).split(".").map(Number);
    return { run, file, row };
  };
  const present = (v) => v !== "" && v !== null && v !== undefined;

  function server() {
    async function get(path, params = {}) {
      const url = new URL(path, window.location.href);
      for (const [name, value] of Object.entries(params)) {
        if (present(value)) url.searchParams.set(name, String(value));
      }
      let response;
      try {
        response = await fetch(url, { headers: { Accept: "application/json" } });
      } catch (err) {
        throw new Error(`the viewer server did not answer (${err.message}); is coa view still running?`);
      }
      let body = null;
      try { body = await response.json(); } catch { body = null; }
      if (!response.ok) throw new Error((body && body.error) || `${response.status} ${response.statusText}`);
      return body;
    }
    return {
      mode: "server",
      runs: () => get("api/runs"),
      episodes: (query) => get("api/episodes", query),
      episode: (key) => get("api/episode", splitKey(key)),
      tokens: (key) => get("api/tokens", splitKey(key)),
      compare: (query) => get("api/compare", query),
    };
  }

  function embedded(data) {
    const rows = data.rows;
    const fileOrder = (x, y) => (x.run - y.run) || (x.file - y.file) || (x.row - y.row);
    const cmp = (x, y) => (x < y ? -1 : x > y ? 1 : 0);

    function keepRow(row, q) {
      const num = (v) => (present(v) ? Number(v) : null);
      if (present(q.run) && row.run !== Number(q.run)) return false;
      if (present(q.env) && row.env_id !== q.env) return false;
      if (present(q.task) && !row.task_id.toLowerCase().includes(String(q.task).toLowerCase())) return false;
      if (present(q.task_id) && row.task_id !== q.task_id) return false;
      if (present(q.status) && row.status !== q.status) return false;
      const minR = num(q.min_reward), maxR = num(q.max_reward);
      if (minR !== null && !(row.reward !== null && row.reward >= minR)) return false;
      if (maxR !== null && !(row.reward !== null && row.reward <= maxR)) return false;
      const length = row[q.len_unit || "turns"];
      const minL = num(q.min_len), maxL = num(q.max_len);
      if (minL !== null && length < minL) return false;
      if (maxL !== null && length > maxL) return false;
      if (q.tool_errors === "none" && row.tool_errors > 0) return false;
      if (q.tool_errors === "some" && row.tool_errors === 0) return false;
      if (q.has_ids === "yes" && !row.has_ids) return false;
      if (q.has_ids === "no" && row.has_ids) return false;
      return true;
    }

    function sortRows(list, sort, descending) {
      const dir = descending ? -1 : 1;
      list.sort(fileOrder);
      if (sort === "file") return descending ? list.reverse() : list;
      return list.sort((x, y) => {
        if (sort === "reward") {  // missing rewards (unreadable lines) last both ways
          if (x.reward === null || y.reward === null) return (x.reward === null) - (y.reward === null);
          return dir * (x.reward - y.reward);
        }
        if (sort === "task") return dir * (cmp(x.task_id, y.task_id) || (x.sample_index - y.sample_index));
        if (sort === "status") return dir * cmp(x.status, y.status);
        return dir * (x[sort] - y[sort]);
      });
    }

    function facet(list, field) {
      const counts = new Map();
      for (const row of list) counts.set(row[field], (counts.get(row[field]) || 0) + 1);
      return [...counts].sort((x, y) => (y[1] - x[1]) || cmp(x[0], y[0]));
    }

    async function episodes(q) {
      const offset = Number(q.offset || 0), limit = Number(q.limit || 50);
      const inRun = rows.filter((row) => !present(q.run) || row.run === Number(q.run));
      const kept = sortRows(inRun.filter((row) => keepRow(row, q)), q.sort || "file", q.order === "desc");
      return { total: kept.length, offset, limit, rows: kept.slice(offset, offset + limit),
               facets: { env: facet(inRun, "env_id"), status: facet(inRun, "status") } };
    }

    function perTask(run, q) {
      const groups = new Map();
      for (const row of rows) {
        if (row.run !== run || row.reward === null || !keepRow(row, { env: q.env, task: q.task })) continue;
        const id = `${row.env_id}\u0000${row.task_id}`;
        if (!groups.has(id)) groups.set(id, []);
        groups.get(id).push(row);
      }
      return groups;
    }

    async function compare(q) {
      const a = perTask(Number(q.a), q), b = perTask(Number(q.b), q);
      const side = (list) => {
        const sorted = [...list].sort((x, y) => x.sample_index - y.sample_index);
        return { reward: sorted.reduce((s, r) => s + r.reward, 0) / sorted.length, n: sorted.length,
                 keys: sorted.slice(0, 32).map((r) => r.key) };
      };
      const pairs = [...a.keys()].filter((id) => b.has(id)).sort().map((id) => {
        const [envId, taskId] = id.split("\u0000");
        const left = side(a.get(id)), right = side(b.get(id));
        return { env_id: envId, task_id: taskId, a: left, b: right, delta: right.reward - left.reward };
      });
      const keyOf = { delta: (p) => p.delta, task: (p) => `${p.env_id}\u0000${p.task_id}`,
                      reward_a: (p) => p.a.reward, reward_b: (p) => p.b.reward }[q.sort || "delta"];
      const dir = q.order === "desc" ? -1 : 1;
      pairs.sort((x, y) => dir * cmp(keyOf(x), keyOf(y)));
      const offset = Number(q.offset || 0), limit = Number(q.limit || 50);
      return { total: pairs.length, offset, limit, rows: pairs.slice(offset, offset + limit),
               only_a: [...a.keys()].filter((id) => !b.has(id)).length,
               only_b: [...b.keys()].filter((id) => !a.has(id)).length };
    }

    async function episode(key) {
      const found = data.episodes[key];
      if (!found) throw new Error(`episode ${key} is not in this export`);
      return found;
    }

    async function tokens(key) {
      const found = (await episode(key)).tokens;
      return found || { blocks: [], total: 0, shown: 0, trained: 0, decoded: false, tokenizer_error: null,
                        error: "token pieces were not included in this export" };
    }

    return { mode: "static", exportInfo: data.export, runs: async () => ({ runs: data.runs }),
             episodes, episode, tokens, compare };
  }

  function detect() {
    const node = document.getElementById("coa-data");
    return node ? embedded(JSON.parse(node.textContent)) : server();
  }

  return { detect, splitKey };
})();
