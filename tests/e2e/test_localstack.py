"""The real CPU vLLM engine with the tiny model: it serves, takes load, and queues past --max-num-seqs."""

import asyncio
import re

import httpx
import pytest

from advisor.localstack import drive, drive_sync

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

WAITING = re.compile(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)$", re.M)


def test_engine_serves_tiny_llama(local_engine):
    models = httpx.get(f"{local_engine.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_drive_completes_every_request(local_engine):
    result = drive_sync(local_engine.url, requests=12, concurrency=6, prompt_words=200, max_tokens=32)
    assert (result.ok, result.errors) == (12, 0), result.first_error
    assert len(result.ttft_s) == 12


def test_queue_forms_behind_max_num_seqs(local_engine):
    async def scenario():
        # Long outputs keep the queue up for seconds: the load's own streams share the event loop
        # (and 2 cores with the engine), so polls come far apart.
        load = asyncio.create_task(
            drive(local_engine.url, requests=24, concurrency=8, prompt_words=400, max_tokens=384, seed=7)
        )
        seen = []
        async with httpx.AsyncClient(timeout=10) as client:
            while not load.done() and not any(seen):
                text = (await client.get(f"{local_engine.url}/metrics")).text
                seen += [float(v) for v in WAITING.findall(text)]
                await asyncio.sleep(0.1)
        return await load, seen

    result, waiting = asyncio.run(scenario())
    assert result.errors == 0, result.first_error
    assert waiting, "no vllm:num_requests_waiting sample was scraped"
    assert max(waiting) > 0, f"no queue seen in {len(waiting)} polls over {result.elapsed_s:.1f} s ({result.ok} ok)"


def test_drive_refuses_remote_targets():
    with pytest.raises(ValueError, match="127.0.0.1"):
        drive_sync("http://10.0.0.1:8000", requests=1)


def test_drive_cuts_requests_at_the_total_limit():
    async def scenario():
        async def silent(reader, writer):
            await asyncio.sleep(30)  # accepts, never answers
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await drive(f"http://127.0.0.1:{port}", requests=3, concurrency=3, total_timeout=0.5)

    result = asyncio.run(scenario())
    assert (result.requests, result.ok, result.errors) == (3, 0, 3)
    assert "cut at the" in result.first_error
    assert result.elapsed_s < 5
