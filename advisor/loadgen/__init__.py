"""The load generator: asyncio + httpx, open loop against absolute deadlines, exact client-side timing."""
