"""Streaming OpenAI-compatible requests (/v1/completions, /v1/chat/completions), timed per chunk.
Cancellation closes the stream, which the engine sees as a client abort."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from advisor.loadgen.record import RequestRecord
from advisor.loadgen.wire import TRANSPORT_ERRORS, Pool, WireError


def _within(seconds: float | None):
    # A timer handle on the running task (no extra task, unlike wait_for): cheap per request.
    return asyncio.timeout(seconds) if seconds else contextlib.nullcontext()


def body(api: str, model: str, prompt: str, max_tokens: int, extra: dict | None = None,
         priority: int | None = None) -> dict:
    b = {"model": model, "max_tokens": max_tokens, "stream": True,
         "stream_options": {"include_usage": True}, "temperature": 0.0,
         # Fixed output length so both arms of an experiment do the same decode work.
         "ignore_eos": True}
    if priority is not None:
        b["priority"] = priority  # vLLM's; an engine without it ignores the field
    if api == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    return {**b, **(extra or {})}


def _tokens_in(chunk: dict, api: str) -> bool:
    """Whether a chunk carries a generated token. As vLLM bench counts them: every chunk with a
    choice is one, even when its text is "" (special tokens, bytes the detokenizer holds back);
    only chat's opening role-only delta and the usage-only chunk carry none."""
    for choice in chunk.get("choices") or []:
        if api != "chat":
            return "text" in choice
        delta = choice.get("delta") or {}
        if delta.get("content") or ("content" in delta and "role" not in delta) or choice.get("finish_reason"):
            return True
    return False


async def send(pool: Pool, api: str, payload: dict, rec: RequestRecord, t0: float,
               cancel_after: int | None = None, deadline_s: float | None = None) -> None:
    """deadline_s bounds the whole request (connect, headers, every chunk): a server that dribbles a
    byte a second would otherwise hold a request forever."""
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    body = json.dumps(payload, separators=(",", ":")).encode()
    rec.sent_s = time.perf_counter() - t0
    streamed = 0
    usage = None
    try:
        async with _within(deadline_s), pool.stream(path, body) as r:
            rec.http_status = r.status_code
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                rec.status, rec.error = "error", f"HTTP {r.status_code}: {text[:200]}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    rec.status = "ok"
                    break
                now = time.perf_counter() - t0
                chunk = json.loads(data)
                if "error" in chunk:
                    rec.status, rec.error = "error", f"stream error: {str(chunk['error'])[:200]}"
                    return
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if _tokens_in(chunk, api):
                    streamed += 1
                    rec.chunk_s.append(now)
                    rec.first_token_s = rec.first_token_s or now
                    rec.last_token_s = now
                    if cancel_after is not None and streamed >= cancel_after:
                        rec.status = "cancelled"
                        break  # leaving the context closes the connection mid-stream
            else:
                rec.status, rec.error = "error", "stream ended without [DONE]"
    except TimeoutError:
        rec.status, rec.error = "error", f"no complete answer within its deadline of {deadline_s:g}s"
    except WireError as e:
        rec.status, rec.error = "error", f"ProtocolError: {str(e)[:200]}"
    except TRANSPORT_ERRORS as e:
        rec.status, rec.error = "error", f"{type(e).__name__}: {str(e)[:200] or 'connection failed'}"
    except json.JSONDecodeError:
        rec.status, rec.error = "error", "malformed stream chunk (not JSON)"
    finally:
        completion = (usage or {}).get("completion_tokens")
        rec.output_tokens = completion if isinstance(completion, int) and rec.status == "ok" else streamed
