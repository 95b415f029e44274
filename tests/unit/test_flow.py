"""workers/stream/processor.py's wait for faust's flow: a stop ends it. faust suspends the flow as
it stops (App._stop_consumer) and never resumes it; a batch that waited on the flow alone held a
worker's SIGTERM for the whole batch_stop_s (15 s) and aborted its transaction (seen in
tests/faults/test_bound_reads.py: a second worker stopped 2 s after it joined). Real mode parts:
a Service and its FlowControlEvent."""

from __future__ import annotations

import asyncio

from mode import Service
from mode.utils.queues import FlowControlEvent

from workers.stream.processor import until_flowing


class App(Service):
    """What until_flowing reads of a faust App: its flow control, should_stop and wait()."""

    def __init__(self) -> None:
        super().__init__()
        self.flow_control = FlowControlEvent()


def run(scenario) -> bool:
    async def main() -> bool:
        app = App()
        app.flow_control.resume()
        return await scenario(app)

    return asyncio.run(main())


def test_a_flowing_app_is_waited_for_not_at_all():
    async def scenario(app: App) -> bool:
        return await asyncio.wait_for(until_flowing(app), 10)

    assert run(scenario) is True


def test_a_suspended_flow_is_waited_out_until_it_resumes():
    async def scenario(app: App) -> bool:
        app.flow_control.suspend()
        waiting = asyncio.ensure_future(until_flowing(app))
        await asyncio.sleep(0)  # it is waiting now
        assert not waiting.done()
        app.flow_control.resume()
        return await asyncio.wait_for(waiting, 10)

    assert run(scenario) is True


def test_a_stop_ends_the_wait_for_a_flow_the_stop_itself_suspended():
    async def scenario(app: App) -> bool:
        app.flow_control.suspend()  # a rebalance, or the stop's own suspension
        waiting = asyncio.ensure_future(until_flowing(app))
        await asyncio.sleep(0)
        assert not waiting.done()
        await app.stop()  # the flow is never resumed
        return await asyncio.wait_for(waiting, 10)

    assert run(scenario) is False


def test_a_stopping_app_is_not_flowing_even_if_its_flow_is_active():
    async def scenario(app: App) -> bool:
        await app.stop()
        return await asyncio.wait_for(until_flowing(app), 10)

    assert run(scenario) is False
