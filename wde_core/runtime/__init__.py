"""Running an assembled pipeline: the engine loop, its asyncio front end, requests and output helpers."""
