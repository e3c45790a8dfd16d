"""A scripted model endpoint on 127.0.0.1 for the interop tier (standard library only).

A real agent client (Claude Code, and others later) is pointed at this endpoint instead of its
model provider.  The endpoint plays a fixed script of turns (tool calls and text), answers
anything else the client asks with something sensible so that the client never stalls, and
records every request it receives, so that a test can assert what the model was shown.

Who owns what (two helpers edit this file; each edits only their own parts):
  - the generic part (Exchange, Recorder, ToolCall, Text, Turn, Script, Conversation,
    ToolResult, Dialect, Endpoint, DIALECTS) and the Anthropic Messages dialect
    (`AnthropicMessages`): the helper of issue 10 part 3 (the Claude Code session test);
  - the OpenAI Responses, OpenAI Chat Completions and Gemini dialects: the helper that adds
    them, each as a Dialect subclass and one DIALECTS entry, in the section marked for them.

How it fits together
--------------------
    script = Script([Turn(ToolCall("ToolSearch", {"query": "select:..."})),
                     lambda conv: Turn(ToolCall("mcp__memprove__tasks", {})),
                     ...],
                    marker="MEMPROVE-SESSION-1")
    with Endpoint("anthropic", script) as endpoint:   # http://127.0.0.1:<port>
        ... run the client with its base URL set to endpoint.url ...
    endpoint.recorder.exchanges          # every request and the answer it got
    endpoint.recorder.errors             # what went wrong inside the endpoint (should be [])

A Dialect turns one wire request into a neutral `Conversation` (the messages so far, the tool
results the model was given, whether tools were offered) and a neutral `Turn` back into that
API's wire format (streaming or not).  `Script.answer(conversation)` picks the turn:

  - a request of the scripted conversation (its first user message holds `marker` and it
    offers tools) gets the script's step number `conversation.depth` (the number of assistant
    turns already in it), so a retried request gets the same turn again; a step may be a
    Turn or a function conversation -> Turn (run inside the endpoint, e.g. to record a Run
    between two calls, or to read an id from an earlier tool result);
  - past the end of the script, and for every other request (a title, a summary, a quota
    check, ...), a short text turn that ends the model's turn.

Bounded: request bodies over MAX_BODY are refused, every socket has a timeout, the server
threads are daemons, and `stop()` shuts it down.
"""

import itertools
import json
import re
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

MAX_BODY = 64 << 20                  # a request body larger than this is refused (413)
SOCKET_TIMEOUT = 60.0                # seconds a connection may sit idle
SECRET_HEADER = re.compile(r"auth|key|token|cookie|secret|session", re.I)
REDACTED = "<redacted>"
DEFAULT_REPLY = "Done."


# ---------------------------------------------------------------------------
# Generic: what a model says, and what it was shown
# ---------------------------------------------------------------------------

class Text:
    """A text block of a model turn."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return "Text(%r)" % (self.text[:60],)


class ToolCall:
    """A tool call of a model turn; `call_id` is made up by the dialect when not given."""

    def __init__(self, name, arguments, call_id=None):
        self.name = name
        self.arguments = arguments
        self.call_id = call_id

    def __repr__(self):
        return "ToolCall(%r, %s)" % (self.name, json.dumps(self.arguments)[:80])


class Turn:
    """One model turn: text and tool calls, in order.  It ends with the tool calls when it
    has any (the client runs them and comes back), else it ends the model's turn."""

    def __init__(self, *parts):
        self.parts = [Text(part) if isinstance(part, str) else part for part in parts]

    @property
    def calls(self):
        return [part for part in self.parts if isinstance(part, ToolCall)]

    def __repr__(self):
        return "Turn(%s)" % ", ".join(repr(part) for part in self.parts)


class ToolResult:
    """A tool result as the client handed it to the model.

    `content` is exactly what the request carried (a string, or the API's list of blocks);
    `text` is its text joined; `is_error` is the API's error flag (None when absent)."""

    def __init__(self, call_id, name, content, text, is_error, raw):
        self.call_id = call_id
        self.name = name
        self.content = content
        self.text = text
        self.is_error = is_error
        self.raw = raw

    def __repr__(self):
        return "ToolResult(%r, %r, is_error=%r, %r)" % (self.call_id, self.name, self.is_error,
                                                       self.text[:80])


class Conversation:
    """A request's conversation in neutral terms, filled in by a dialect."""

    def __init__(self, first_user_text, depth, tool_results, offers_tools, stream, raw):
        self.first_user_text = first_user_text    # the text of the first user message
        self.depth = depth                        # assistant turns already in the conversation
        self.tool_results = tool_results          # [ToolResult], in the order they appear
        self.offers_tools = offers_tools          # the request lists tools the model may call
        self.stream = stream                      # the client asked for a streamed answer
        self.raw = raw                            # the parsed request body

    def result_of(self, name):
        """The last result of the tool `name`, or None."""
        found = [result for result in self.tool_results if result.name == name]
        return found[-1] if found else None


# ---------------------------------------------------------------------------
# Generic: the script
# ---------------------------------------------------------------------------

class Script:
    """A fixed list of steps (Turn, or function Conversation -> Turn) for the one
    conversation whose first user message holds `marker`; see the module's docstring."""

    def __init__(self, steps, marker, default_reply=DEFAULT_REPLY):
        self.steps = list(steps)
        self.marker = marker
        self.default_reply = default_reply
        self.played = []                # (depth, Turn) of every scripted answer, retries too

    def is_scripted(self, conversation):
        return conversation.offers_tools and self.marker in conversation.first_user_text

    def answer(self, conversation):
        """(turn, scripted step number or None)."""
        if not self.is_scripted(conversation) or conversation.depth >= len(self.steps):
            return Turn(self.default_reply), None
        step = self.steps[conversation.depth]
        turn = step(conversation) if callable(step) else step
        if not isinstance(turn, Turn):
            raise TypeError("script step %d gave %r, not a Turn" % (conversation.depth, turn))
        self.played.append((conversation.depth, turn))
        return turn, conversation.depth

    @property
    def finished(self):
        """Every step has been played at least once."""
        return set(depth for depth, _ in self.played) == set(range(len(self.steps)))


# ---------------------------------------------------------------------------
# Generic: the record
# ---------------------------------------------------------------------------

class Exchange:
    """One request and the answer it got.  Headers whose name looks secret are redacted."""

    def __init__(self, number, method, path, query, headers, body):
        self.number = number
        self.method = method
        self.path = path                # without the query string
        self.query = query              # [(name, value)]
        self.headers = headers          # [(name, value)], secrets redacted
        self.body = body                # bytes, as received
        self.status = None              # the answer's status, once sent
        self.answer = b""               # the answer's body, as sent (a stream in full)
        self.route = None               # the dialect's name for what was asked
        self.step = None                # the script step it played, if it played one

    @property
    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError:
            return None

    def header(self, name):
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def to_dict(self):
        return {"number": self.number, "method": self.method, "path": self.path,
                "query": self.query, "headers": self.headers, "route": self.route,
                "step": self.step, "status": self.status,
                "body": self.body.decode("utf-8", "replace"),
                "answer": self.answer.decode("utf-8", "replace")}

    def __repr__(self):
        return "<Exchange %d %s %s -> %s (%s)>" % (self.number, self.method, self.path,
                                                   self.status, self.route)


class Recorder:
    """Every request in arrival order, and every error inside the endpoint."""

    def __init__(self):
        self._lock = threading.Lock()
        self._exchanges = []
        self._errors = []
        self._numbers = itertools.count(1)

    def add(self, method, path, query, headers, body):
        shown = [(name, REDACTED if SECRET_HEADER.search(name) else value)
                 for name, value in headers]
        with self._lock:
            exchange = Exchange(next(self._numbers), method, path, query, shown, body)
            self._exchanges.append(exchange)
        return exchange

    def error(self, text):
        with self._lock:
            self._errors.append(text)

    @property
    def exchanges(self):
        with self._lock:
            return list(self._exchanges)

    @property
    def errors(self):
        with self._lock:
            return list(self._errors)

    def routed(self, route):
        return [exchange for exchange in self.exchanges if exchange.route == route]

    def dump(self, path):
        """Write every exchange as one JSON line to `path` (for a failing test's reader)."""
        with open(str(path), "w", encoding="utf-8") as handle:
            for exchange in self.exchanges:
                handle.write(json.dumps(exchange.to_dict()) + "\n")
            for error in self.errors:
                handle.write(json.dumps({"error": error}) + "\n")

    def summary(self, limit=60):
        lines = ["%r" % exchange for exchange in self.exchanges[-limit:]]
        return "\n".join(lines + ["ERROR: " + error for error in self.errors])


# ---------------------------------------------------------------------------
# Generic: dialects and the server
# ---------------------------------------------------------------------------

class Reply:
    """What a dialect answers: a status, headers, and a body (bytes) or a list of chunks
    written one by one (a stream)."""

    def __init__(self, status, body=b"", content_type="application/json", chunks=None,
                 headers=()):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.chunks = chunks
        self.headers = list(headers)

    @classmethod
    def json(cls, status, value, headers=()):
        return cls(status, json.dumps(value).encode("utf-8"), headers=headers)


class Dialect:
    """One model API.  Subclasses set `name` and `routes`, a list of
    (HTTP method, path regex, method name); the method takes (exchange, match) and returns
    a Reply.  `not_found` answers a request no route takes; `head` and `model` (which
    needs the subclass's `_model_info`) serve the routes of those names."""

    name = None
    routes = []

    def __init__(self, script, recorder):
        self.script = script
        self.recorder = recorder
        self._ids = itertools.count(1)

    def new_id(self, prefix):
        return "%s%024d" % (prefix, next(self._ids))

    def dispatch(self, exchange):
        for method, pattern, handler in self.routes:
            match = re.fullmatch(pattern, exchange.path)
            if match and method == exchange.method:
                exchange.route = handler
                return getattr(self, handler)(exchange, match)
        exchange.route = "not_found"
        return self.not_found(exchange)

    def not_found(self, exchange):
        return Reply.json(404, {"error": "not found: %s %s" % (exchange.method, exchange.path)})

    def failed(self, exchange, text):
        """A reply after an error inside the endpoint (already recorded)."""
        return Reply.json(500, {"error": text})

    def head(self, exchange, match):
        """A dialect's `HEAD` route (a client's reachability probe): 200, no body."""
        return Reply(200, b"")

    def model(self, exchange, match):
        """A dialect's one-model route (`GET .../models/<model>`): its `_model_info`."""
        return Reply.json(200, self._model_info(match.group("model")))

    def turn_for(self, exchange, body, default_model):
        """A request body's conversation, the script's turn for it, and the model the body
        names (default_model when it names none)."""
        conversation = self.conversation(body)
        turn = self.play(exchange, conversation)
        model = body.get("model") if isinstance(body.get("model"), str) else default_model
        return conversation, turn, model

    def play(self, exchange, conversation):
        """The script's turn for a conversation; an error in a step is recorded and the
        model's turn ends with a text naming it, so that the client stops promptly."""
        try:
            turn, step = self.script.answer(conversation)
        except Exception:
            self.recorder.error("script step %s: %s" % (conversation.depth,
                                                        traceback.format_exc()))
            return Turn("The endpoint's script failed at step %d." % conversation.depth)
        exchange.step = step
        return turn


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        self.endpoint.recorder.error("connection error: %s" % traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT

    def log_message(self, format, *args):
        pass

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts, total = [], 0
            while True:
                size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1000).strip():
                        pass
                    return b"".join(parts)
                total += size
                if total > MAX_BODY:
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.readline(10)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return None
        return self.rfile.read(length) if length else b""

    def _handle(self):
        endpoint = self.server.endpoint
        parts = urlsplit(self.path)
        body = self._read_body()
        exchange = endpoint.recorder.add(self.command, parts.path, parse_qsl(parts.query),
                                         list(self.headers.items()), body or b"")
        if body is None:
            reply = Reply.json(413, {"error": "request body too large"})
            self.close_connection = True
        else:
            try:
                reply = endpoint.dialect.dispatch(exchange)
            except Exception:
                text = "%s %s: %s" % (self.command, parts.path, traceback.format_exc())
                endpoint.recorder.error(text)
                reply = endpoint.dialect.failed(exchange, text)
        self._send(exchange, reply)

    def _send(self, exchange, reply):
        exchange.status = reply.status
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers:
            self.send_header(name, value)
        if reply.chunks is None:
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            exchange.answer = reply.body
            return
        # A stream: chunked transfer encoding, one HTTP chunk per piece, flushed each time.
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        sent = []
        for chunk in reply.chunks:
            if not chunk:
                continue
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            sent.append(chunk)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        exchange.answer = b"".join(sent)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle


class Endpoint:
    """The HTTP server on 127.0.0.1 speaking one dialect (a DIALECTS key or a class)."""

    def __init__(self, dialect, script, port=0):
        self.recorder = Recorder()
        self.script = script
        dialect_class = DIALECTS[dialect] if isinstance(dialect, str) else dialect
        self.dialect = dialect_class(script, self.recorder)
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.endpoint = self
        self._thread = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def split_text(text, pieces):
    """`text` cut into at most `pieces` parts (for deltas), never an empty part."""
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[index:index + size] for index in range(0, len(text), size)] or [""]


# ---------------------------------------------------------------------------
# Anthropic Messages (owner: the helper of issue 10 part 3)
# ---------------------------------------------------------------------------

def anthropic_text(content):
    """The text of a Messages API content value (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content
                       if isinstance(block, dict) and block.get("type") == "text")
    return ""


class AnthropicMessages(Dialect):
    """The Anthropic Messages API as Claude Code uses it: `POST /v1/messages` (SSE when
    `stream` is true, else one JSON message), `POST /v1/messages/count_tokens`, and a
    well-formed Anthropic error for anything else (a 404 ends a client's side request at
    once; nothing is left waiting)."""

    name = "anthropic"
    routes = [
        ("POST", r"/v1/messages", "messages"),
        ("POST", r"/v1/messages/count_tokens", "count_tokens"),
        ("GET", r"/v1/models", "models"),
        ("GET", r"/v1/models/(?P<model>[^/]+)", "model"),
        ("HEAD", r"/.*", "head"),
    ]
    DELTAS = 3                           # how many deltas each block's text or input is cut into

    @staticmethod
    def error_body(kind, message):
        return {"type": "error", "error": {"type": kind, "message": message}}

    def not_found(self, exchange):
        return Reply.json(404, self.error_body(
            "not_found_error", "No such endpoint here: %s %s" % (exchange.method, exchange.path)))

    def failed(self, exchange, text):
        return Reply.json(500, self.error_body("api_error", "The scripted endpoint failed."))

    def models(self, exchange, match):
        return Reply.json(200, {"data": [self._model_info("claude-scripted")], "has_more": False,
                                "first_id": "claude-scripted", "last_id": "claude-scripted"})

    @staticmethod
    def _model_info(model):
        return {"type": "model", "id": model, "display_name": model,
                "created_at": "2026-01-01T00:00:00Z"}

    def count_tokens(self, exchange, match):
        return Reply.json(200, {"input_tokens": max(1, len(exchange.body) // 4)})

    def conversation(self, body):
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        first = anthropic_text(users[0].get("content")) if users else ""
        names = {}
        results = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use":
                    names[block.get("id")] = block.get("name")
                elif block.get("type") == "tool_result":
                    call_id = block.get("tool_use_id")
                    results.append(ToolResult(call_id, names.get(call_id), block.get("content"),
                                              anthropic_text(block.get("content")),
                                              block.get("is_error"), block))
        depth = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        return Conversation(first, depth, results, bool(body.get("tools")),
                            body.get("stream") is True, body)

    def messages(self, exchange, match):
        body = exchange.json
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return Reply.json(400, self.error_body("invalid_request_error",
                                                   "messages: a list is required"))
        conversation, turn, model = self.turn_for(exchange, body, "claude-scripted")
        blocks = []
        for index, part in enumerate(turn.parts):
            if isinstance(part, ToolCall):
                call_id = part.call_id or "toolu_%02d_%02d_%s" % (
                    conversation.depth, index, part.name.replace("_", "")[-12:])
                blocks.append({"type": "tool_use", "id": call_id, "name": part.name,
                               "input": part.arguments})
            else:
                blocks.append({"type": "text", "text": part.text})
        stop = "tool_use" if turn.calls else "end_turn"
        usage = {"input_tokens": max(1, len(exchange.body) // 4), "output_tokens": 1,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        message = {"id": self.new_id("msg_"), "type": "message", "role": "assistant",
                   "model": model, "content": blocks, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not conversation.stream:
            return Reply.json(200, message, headers=[("request-id", self.new_id("req_"))])
        return Reply(200, content_type="text/event-stream", chunks=list(self._events(message)),
                     headers=[("request-id", self.new_id("req_"))])

    def _events(self, message):
        def event(kind, data):
            data = dict(type=kind, **data)
            return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode("utf-8")

        start = dict(message, content=[], stop_reason=None)
        yield event("message_start", {"message": start})
        yield event("ping", {})
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                yield event("content_block_start", {"index": index,
                                                    "content_block": {"type": "text", "text": ""}})
                for piece in split_text(block["text"], self.DELTAS):
                    yield event("content_block_delta", {
                        "index": index, "delta": {"type": "text_delta", "text": piece}})
            else:
                yield event("content_block_start", {"index": index, "content_block": dict(
                    block, input={})})
                for piece in split_text(json.dumps(block["input"]), self.DELTAS):
                    yield event("content_block_delta", {
                        "index": index, "delta": {"type": "input_json_delta",
                                                  "partial_json": piece}})
            yield event("content_block_stop", {"index": index})
        yield event("message_delta", {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": max(1, len(json.dumps(message["content"])) // 4)}})
        yield event("message_stop", {})


# ---------------------------------------------------------------------------
# Other dialects (owner: the helper adding OpenAI Responses, Chat Completions and Gemini):
# each a Dialect subclass here, and one entry in DIALECTS below.
# ---------------------------------------------------------------------------

def _json_text(value):
    """A tool output as text: a string as it is, blocks' text joined, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [block.get("text") for block in value
                 if isinstance(block, dict) and isinstance(block.get("text"), str)]
        if texts:
            return "".join(texts)
    return json.dumps(value)


def _sse(data, event=None):
    head = "event: %s\n" % event if event else ""
    return ("%sdata: %s\n\n" % (head, json.dumps(data))).encode("utf-8")


def _arguments_json(call):
    return json.dumps(call.arguments if call.arguments is not None else {})


class _OpenAIDialect(Dialect):
    """What the two OpenAI APIs share: their error bodies."""

    def not_found(self, exchange):
        return Reply.json(404, {"error": {"type": "invalid_request_error", "code": "not_found",
                                          "message": "No such endpoint here: %s %s" % (
                                              exchange.method, exchange.path)}})

    def failed(self, exchange, text):
        return Reply.json(500, {"error": {"type": "server_error", "code": None,
                                          "message": "The scripted endpoint failed."}})


class OpenAIResponses(_OpenAIDialect):
    """The OpenAI Responses API as Codex uses it: `POST /v1/responses` (SSE when `stream` is
    true, else one response object); the conversation is the `input` item list, a tool call
    is a `function_call` item and its result a `function_call_output` item.  A ToolCall name
    `ns.tool` (a dot) is sent as a `function_call` with `namespace: ns` and `name: tool`
    (Codex groups an MCP server's tools in a namespace)."""

    name = "openai-responses"
    routes = [
        ("POST", r"(?:/v1)?/responses", "responses"),
        ("GET", r"(?:/v1)?/models", "models"),
        ("HEAD", r"/.*", "head"),
    ]

    def models(self, exchange, match):
        return Reply.json(200, {"object": "list", "data": [
            {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "scripted"}],
            "models": []})

    @staticmethod
    def _assistant_side(item):
        kind = item.get("type")
        return (kind == "message" and item.get("role") == "assistant") or kind in (
            "function_call", "custom_tool_call", "reasoning", "local_shell_call",
            "web_search_call", "tool_search_call")

    def conversation(self, body):
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = [item for item in items if isinstance(item, dict)] if isinstance(
            items, list) else []
        first = ""
        names = {}
        results = []
        depth = 0
        previous_assistant = False
        for item in items:
            kind = item.get("type", "message")
            if kind == "message" and item.get("role") == "user" and not depth:
                # Codex opens with an environment message: every user message before the
                # model's first turn counts as the opening text.
                first += _json_text(item.get("content")) + "\n"
            if kind in ("function_call", "custom_tool_call"):
                name = item.get("name")
                if item.get("namespace"):
                    name = "%s.%s" % (item["namespace"], name)
                names[item.get("call_id")] = name
            elif kind in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                results.append(ToolResult(item.get("call_id"), names.get(item.get("call_id")),
                                          output, _json_text(output), None, item))
            assistant = self._assistant_side(item)
            if assistant and not previous_assistant:
                depth += 1
            previous_assistant = assistant
        return Conversation(first, depth, results, bool(body.get("tools")),
                            body.get("stream") is True, body)

    def responses(self, exchange, match):
        body = exchange.json
        if not isinstance(body, dict):
            return Reply.json(400, {"error": {"type": "invalid_request_error",
                                              "message": "a JSON object is required"}})
        conversation, turn, model = self.turn_for(exchange, body, "scripted-model")
        output = []
        for index, part in enumerate(turn.parts):
            if isinstance(part, ToolCall):
                namespace, _, name = part.name.rpartition(".")
                item = {"type": "function_call", "id": self.new_id("fc_"),
                        "call_id": part.call_id or "call_%02d_%02d" % (conversation.depth, index),
                        "name": name, "arguments": _arguments_json(part), "status": "completed"}
                if namespace:
                    item["namespace"] = namespace
            else:
                item = {"type": "message", "id": self.new_id("msg_"), "role": "assistant",
                        "status": "completed", "content": [
                            {"type": "output_text", "text": part.text, "annotations": []}]}
            output.append(item)
        tokens = max(1, len(exchange.body) // 4)
        response = {"id": self.new_id("resp_"), "object": "response", "created_at": int(time.time()),
                    "status": "completed", "model": model, "output": output,
                    "usage": {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
                              "total_tokens": tokens + 1}}
        if not conversation.stream:
            return Reply.json(200, response)
        return Reply(200, content_type="text/event-stream", chunks=list(self._events(response)))

    def _events(self, response):
        sequence = itertools.count()

        def event(kind, data):
            return _sse(dict(type=kind, sequence_number=next(sequence), **data), kind)

        begun = dict(response, status="in_progress", output=[], usage=None)
        yield event("response.created", {"response": begun})
        yield event("response.in_progress", {"response": begun})
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                yield event("response.output_item.added", {"output_index": index, "item": dict(
                    item, status="in_progress", content=[])})
                text = item["content"][0]["text"]
                for piece in split_text(text, 3):
                    yield event("response.output_text.delta", {
                        "item_id": item["id"], "output_index": index, "content_index": 0,
                        "delta": piece})
                yield event("response.output_text.done", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "text": text})
            else:
                yield event("response.output_item.added", {"output_index": index, "item": dict(
                    item, status="in_progress", arguments="")})
                yield event("response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": index,
                    "arguments": item["arguments"]})
            yield event("response.output_item.done", {"output_index": index, "item": item})
        yield event("response.completed", {"response": response})


class ChatCompletions(_OpenAIDialect):
    """The OpenAI Chat Completions API as OpenAI-compatible clients use it (OpenCode, Cline,
    Continue): `POST /v1/chat/completions` (SSE chunks ending in `data: [DONE]` when `stream`
    is true, else one completion); a tool call is an assistant message's `tool_calls` entry
    and its result a `tool` message; `GET /v1/models` lists one model."""

    name = "openai-chat"
    routes = [
        ("POST", r"(?:/v1)?/chat/completions", "completions"),
        ("GET", r"(?:/v1)?/models", "models"),
        ("GET", r"(?:/v1)?/models/(?P<model>[^/]+)", "model"),
        ("HEAD", r"/.*", "head"),
    ]
    MODEL = "scripted-model"

    def _model_info(self, model):
        return {"id": model, "object": "model", "created": 0, "owned_by": "scripted",
                "context_length": 200000}

    def models(self, exchange, match):
        return Reply.json(200, {"object": "list", "data": [self._model_info(self.MODEL)]})

    def conversation(self, body):
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        users = [m for m in messages if m.get("role") == "user"]
        first = _json_text(users[0].get("content")) if users else ""
        names = {}
        results = []
        for message in messages:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    names[call.get("id")] = (call.get("function") or {}).get("name")
            if message.get("role") == "tool":
                call_id = message.get("tool_call_id")
                content = message.get("content")
                results.append(ToolResult(call_id, names.get(call_id), content,
                                          _json_text(content), None, message))
        depth = sum(1 for m in messages if m.get("role") == "assistant")
        return Conversation(first, depth, results, bool(body.get("tools")),
                            body.get("stream") is True, body)

    def completions(self, exchange, match):
        body = exchange.json
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return Reply.json(400, {"error": {"type": "invalid_request_error",
                                              "message": "messages: a list is required"}})
        conversation, turn, model = self.turn_for(exchange, body, self.MODEL)
        text = "".join(part.text for part in turn.parts if isinstance(part, Text))
        calls = [{"id": part.call_id or "call_%02d_%02d" % (conversation.depth, index),
                  "type": "function",
                  "function": {"name": part.name, "arguments": _arguments_json(part)}}
                 for index, part in enumerate(turn.calls)]
        finish = "tool_calls" if calls else "stop"
        tokens = max(1, len(exchange.body) // 4)
        usage = {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1}
        ident, created = self.new_id("chatcmpl-"), int(time.time())
        if not conversation.stream:
            message = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            return Reply.json(200, {"id": ident, "object": "chat.completion", "created": created,
                                    "model": model, "usage": usage, "choices": [
                                        {"index": 0, "message": message,
                                         "finish_reason": finish}]})

        def chunk(delta, finish_reason=None, **extra):
            return _sse(dict({"id": ident, "object": "chat.completion.chunk", "created": created,
                              "model": model, "choices": [
                                  {"index": 0, "delta": delta, "finish_reason": finish_reason}]},
                             **extra))

        chunks = [chunk({"role": "assistant", "content": ""})]
        for piece in (split_text(text, 3) if text else []):
            chunks.append(chunk({"content": piece}))
        for index, call in enumerate(calls):
            chunks.append(chunk({"tool_calls": [{"index": index, "id": call["id"],
                                                 "type": "function", "function": {
                                                     "name": call["function"]["name"],
                                                     "arguments": ""}}]}))
            chunks.append(chunk({"tool_calls": [{"index": index, "function": {
                "arguments": call["function"]["arguments"]}}]}))
        chunks.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(_sse({"id": ident, "object": "chat.completion.chunk",
                                "created": created, "model": model, "choices": [],
                                "usage": usage}))
        chunks.append(b"data: [DONE]\n\n")
        return Reply(200, content_type="text/event-stream", chunks=chunks)


class GeminiGenerateContent(Dialect):
    """The Gemini API as Gemini CLI uses it: `POST /v1beta/models/M:generateContent` and
    `:streamGenerateContent` (SSE with `alt=sse`), `:countTokens`; a tool call is a model
    `functionCall` part and its result a user `functionResponse` part."""

    name = "gemini"
    routes = [
        ("POST", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+):generateContent", "generate"),
        ("POST", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+):streamGenerateContent",
         "stream_generate"),
        ("POST", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+):countTokens", "count_tokens"),
        ("POST", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+):embedContent", "embed"),
        ("POST", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+):batchEmbedContents",
         "batch_embed"),
        ("GET", r"/(?P<version>v1\w*)/models", "models"),
        ("GET", r"/(?P<version>v1\w*)/models/(?P<model>[^/:]+)", "model"),
        ("HEAD", r"/.*", "head"),
    ]

    @staticmethod
    def error_body(code, status, message):
        return {"error": {"code": code, "status": status, "message": message}}

    def not_found(self, exchange):
        return Reply.json(404, self.error_body(404, "NOT_FOUND", "No such endpoint here: %s %s" % (
            exchange.method, exchange.path)))

    def failed(self, exchange, text):
        return Reply.json(500, self.error_body(500, "INTERNAL", "The scripted endpoint failed."))

    @staticmethod
    def _model_info(model):
        return {"name": "models/" + model, "displayName": model, "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"]}

    def models(self, exchange, match):
        return Reply.json(200, {"models": [self._model_info("gemini-2.5-pro")]})

    def count_tokens(self, exchange, match):
        return Reply.json(200, {"totalTokens": max(1, len(exchange.body) // 4)})

    def embed(self, exchange, match):
        return Reply.json(200, {"embedding": {"values": [0.0] * 8}})

    def batch_embed(self, exchange, match):
        body = exchange.json or {}
        return Reply.json(200, {"embeddings": [{"values": [0.0] * 8}
                                               for _ in body.get("requests") or [None]]})

    def conversation(self, body, stream):
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        first = ""
        results = []
        depth = 0
        for content in contents:
            parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
            if content.get("role", "user") == "user":
                texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
                if texts and not first:
                    first = "".join(texts)
                for part in parts:
                    answer = part.get("functionResponse")
                    if isinstance(answer, dict):
                        response = answer.get("response")
                        if isinstance(response, dict) and set(response) == {"output"}:
                            text = _json_text(response["output"])
                        elif isinstance(response, dict) and "content" in response:
                            text = _json_text(response["content"])
                        else:
                            text = _json_text(response)
                        results.append(ToolResult(answer.get("id"), answer.get("name"), response,
                                                  text, None, part))
            elif content.get("role") == "model":
                depth += 1
        tools = body.get("tools") or []
        offers = any(isinstance(tool, dict) and tool.get("functionDeclarations")
                     for tool in tools)
        return Conversation(first, depth, results, offers, stream, body)

    def _answer(self, exchange, match, stream):
        body = exchange.json
        if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
            return Reply.json(400, self.error_body(400, "INVALID_ARGUMENT",
                                                   "contents: a list is required"))
        conversation = self.conversation(body, stream)
        turn = self.play(exchange, conversation)
        parts = []
        for index, part in enumerate(turn.parts):
            if isinstance(part, ToolCall):
                call = {"name": part.name, "args": part.arguments or {}}
                if part.call_id:
                    call["id"] = part.call_id
                parts.append({"functionCall": call})
            else:
                parts.append({"text": part.text})
        tokens = max(1, len(exchange.body) // 4)
        response = {"candidates": [{"content": {"role": "model", "parts": parts},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": 1,
                                      "totalTokenCount": tokens + 1},
                    "modelVersion": match.group("model"),
                    "responseId": self.new_id("gemini-")}
        if not stream:
            return Reply.json(200, response)
        return Reply(200, content_type="text/event-stream", chunks=[_sse(response)])

    def generate(self, exchange, match):
        return self._answer(exchange, match, False)

    def stream_generate(self, exchange, match):
        return self._answer(exchange, match, True)



DIALECTS = {
    "anthropic": AnthropicMessages,
    "openai-responses": OpenAIResponses,
    "openai-chat": ChatCompletions,
    "gemini": GeminiGenerateContent,
}
