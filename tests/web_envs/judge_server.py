"""A deterministic stand-in for a judge model behind a real OpenAI-compatible HTTP endpoint.

Only the *model* is a test double: it reads the grading prompt, compares ``[response]``
with ``[correct_answer]`` after light normalisation and replies in the official grader
format. The transport is real (threaded stdlib HTTP server on 127.0.0.1), so the judge
client's request building, retries, timeouts and parsing run exactly as in production.
The ``model`` name selects a behaviour: ``grader`` (correct), ``down`` (HTTP 500),
``flaky`` (503 on the first call for a prompt, then correct), ``rambler`` (no verdict),
``waffler`` (both verdicts), ``slow`` (answers after 2 s), ``broken`` (not a completion),
``bad-key`` (401 unless the bearer token is ``secret``). Judges an injected reply could fool,
for the hacking tests: ``echo-rules`` (repeats the prompt's rules and stops), ``parrot``
(quotes the whole response, fence lines included, then grades it honestly), ``copycat``
(its reply is the response itself, as a confused model might), ``gullible`` (persuaded by a
response that mentions a verdict or instructions: says yes and quotes the correct answer),
``swayed`` (persuaded the same way, but says yes about the response's own first line, so the
extracted answer is in the response).
"""

from __future__ import annotations

import json
import re
import string
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

from coa_envs.loopback import QuietHandler, Serving, loopback_server

_FIELD = re.compile(r"^\[(question|correct_answer)\]: (.*?)(?=\n\n)", re.S | re.M)
_RESPONSE = re.compile(r"<<<BEGIN (RESPONSE-\w+)>>>\n(.*?)\n<<<END \1>>>", re.S)


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch not in string.punctuation and not ch.isspace())


def _block(extracted: str, verdict: str) -> str:
    return (f"extracted_final_answer: {extracted}\nreasoning: compared the normalised answers.\n"
            f"correct: {verdict}\nconfidence: 100")


def _grade(prompt: str, model: str = "grader") -> str:
    fields = dict(_FIELD.findall(prompt))
    fenced = _RESPONSE.search(prompt)
    response, correct = (fenced.group(2) if fenced else ""), fields.get("correct_answer", "")
    verdict = "yes" if response and _norm(correct) in _norm(response) else "no"
    honest = _block(response.strip() or "None", verdict)
    if model == "echo-rules":
        return prompt[prompt.index("extracted_final_answer:"):]
    if model == "parrot":
        return f"The response reads:\n{fenced.group(0) if fenced else ''}\n\n{honest}"
    if model == "copycat":
        return response
    if model == "swayed" and any(w in response.lower() for w in ("correct", "ignore", "verdict", "grade", "system")):
        return _block(response.strip().splitlines()[0] if response.strip() else "None", "yes")
    if model == "gullible" and any(w in response.lower() for w in ("correct", "ignore", "verdict", "yes")):
        return _block(correct, "yes")
    return honest


class _Handler(QuietHandler):
    server: _JudgeServer

    def _reply(self, status: int, payload: object) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_body(status, body, "application/json")

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.requests.append({"path": self.path, "body": request,
                                     "auth": self.headers.get("Authorization")})
        if self.path != "/v1/chat/completions":
            self._reply(404, {"error": "not found"})
            return
        model, prompt = request["model"], request["messages"][-1]["content"]
        self.server.calls[(model, prompt)] += 1
        if model == "down":
            self._reply(500, {"error": "internal"})
            return
        if model == "flaky" and self.server.calls[(model, prompt)] == 1:
            self._reply(503, {"error": "overloaded"})
            return
        if model == "bad-key" and self.headers.get("Authorization") != "Bearer secret":
            self._reply(401, {"error": "bad key"})
            return
        if model == "slow":
            time.sleep(2.0)
        if model == "broken":
            self._reply(200, b"<html>proxy error</html>")
            return
        content = _grade(prompt, model)
        if model == "rambler":
            content = "I think the answer looks plausible overall."
        elif model == "waffler":
            content = "correct: yes\n...on reflection...\ncorrect: no"
        self._reply(200, {"id": "x", "object": "chat.completion", "model": model,
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": content}}]})


class _JudgeServer(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], handler: type) -> None:
        super().__init__(address, handler)
        self.requests: list[dict] = []
        self.calls: Counter[tuple[str, str]] = Counter()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@contextmanager
def judge_server() -> Iterator[_JudgeServer]:
    # quiet: a client that timed out (the "slow" model) closes early; that is expected.
    with Serving(loopback_server(_Handler, server_class=_JudgeServer)) as server:
        yield server
