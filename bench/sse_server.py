"""A small, fast OpenAI-style SSE server on loopback, for the client's overhead measurement
and for unit tests of the harness (it answers like vLLM's OpenAI server, with a scripted
reply instead of a model).

Endpoints: GET /v1/models, GET /metrics, POST /v1/chat/completions, /v1/completions,
/tokenize. A request streams `max_tokens` one-token chunks (text from `reply`, cycled) then a
usage chunk and [DONE]; `token_delay` spaces them out; `batch` events go out per write.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Callable

Reply = Callable[[dict], str]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeOpenAIServer:
    def __init__(
        self,
        reply: Reply | str = "tok ",
        token_delay: float = 0.0,
        batch: int = 1,
        model: str = "fake-model",
        max_model_len: int = 4096,
        reject_extensions: bool = False,
        close_idle: bool = False,
    ):
        self.reply = reply if callable(reply) else (lambda body, _r=reply: _r)
        self.token_delay = token_delay
        self.batch = max(1, batch)
        self.model = model
        self.max_model_len = max_model_len
        self.reject_extensions = reject_extensions  # answer 400 to vLLM-only fields, like a strict server
        self.close_idle = close_idle  # close a kept-alive connection right after each response
        self.requests: list[dict] = []
        self.prefix_hits = 0  # a toy prefix cache: prompts whose first 256 chars were seen
        self.generated = 0  # vllm:generation_tokens_total
        self.running = 0  # vllm:num_requests_running
        self.foreign_per_request = 0  # tests: tokens "someone else" generates alongside each request
        self._prefixes: set[str] = set()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._server = server
        self.port = server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_in_thread(self) -> "FakeOpenAIServer":
        ready = threading.Event()

        def run():
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if not (self._loop and self._server):
            return

        async def shutdown():
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(5)
        self._loop.close()

    # ---- HTTP -------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
                n = int(headers.get("content-length", "0"))
                body = json.loads(await reader.readexactly(n)) if n else {}
                await self._route(method, path, body, writer)
                if self.close_idle:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _send_json(self, writer, obj, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )
        await writer.drain()

    async def _route(self, method: str, path: str, body: dict, writer) -> None:
        if path == "/v1/models":
            return await self._send_json(
                writer,
                {
                    "object": "list",
                    "data": [
                        {"id": self.model, "object": "model", "root": self.model, "max_model_len": self.max_model_len}
                    ],
                },
            )
        if path == "/metrics":
            data = (
                b'vllm:prefix_cache_hits_total{model_name="x"} %d.0\n'
                b'vllm:generation_tokens_total{model_name="x"} %d.0\n'
                b'vllm:num_requests_running{model_name="x"} %d.0\n' % (self.prefix_hits, self.generated, self.running)
            )
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
            return await writer.drain()
        if path == "/tokenize":
            text = body.get("prompt") or json.dumps(body.get("messages"))
            toks = list(text.encode())
            return await self._send_json(writer, {"tokens": toks, "count": len(toks)})
        if path in ("/v1/chat/completions", "/v1/completions"):
            self.requests.append(body)
            head = json.dumps(body.get("messages") or body.get("prompt"))[:256]
            if len(head) == 256:
                self.prefix_hits += head in self._prefixes
                self._prefixes.add(head)
            if self.reject_extensions and ("min_tokens" in body or "ignore_eos" in body):
                return await self._send_json(writer, {"error": {"message": "unknown field min_tokens"}}, 400)
            if not body.get("stream"):
                text = self.reply(body)
                n = len(text.split())
                return await self._send_json(
                    writer,
                    {
                        "choices": [
                            {
                                "index": 0,
                                "text": text,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "length",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                    },
                )
            self.running += 1
            try:
                return await self._stream(path, body, writer)
            finally:
                self.running -= 1
        await self._send_json(writer, {"error": "not found"}, 404)

    async def _stream(self, path: str, body: dict, writer) -> None:
        chat = path.endswith("chat/completions")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        text = self.reply(body) or " "
        pieces = text.split(" ")
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("messages") or body.get("prompt") or ""
        # a prompt of ids is counted exactly (the bench checks usage.prompt_tokens against it)
        prompt_tokens = (
            len(prompt)
            if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt)
            else len(json.dumps(prompt)) // 4
        )
        events: list[bytes] = []
        for i in range(n):
            t = pieces[i % len(pieces)] + " "
            fin = "length" if i == n - 1 else None
            choice = (
                {"index": 0, "delta": {"content": t}, "finish_reason": fin}
                if chat
                else {"index": 0, "text": t, "finish_reason": fin}
            )
            events.append(
                b"data: "
                + json.dumps({"id": "x", "object": "chunk", "choices": [choice]}, separators=(",", ":")).encode()
                + b"\n\n"
            )
            if len(events) >= self.batch or i == n - 1:
                writer.write(_chunk(b"".join(events)))
                events.clear()
                await writer.drain()
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
        self.generated += n + self.foreign_per_request
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        tail = b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n"
        writer.write(_chunk(tail) + b"0\r\n\r\n")
        await writer.drain()


def main() -> None:
    """`python -m recipekit.bench.sse_server [batch] [token_delay_s]`: serve until killed; prints the port."""

    async def run():
        srv = FakeOpenAIServer(
            batch=int(sys.argv[1]) if len(sys.argv) > 1 else 1,
            token_delay=float(sys.argv[2]) if len(sys.argv) > 2 else 0.0,
        )
        await srv.start()
        print(srv.port, flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
