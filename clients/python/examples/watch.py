"""``watch()``: the event stream of one lease, while another thread changes it."""

import os
import threading
import time

from leasehold import Acquired, Attempt, Client

URL = os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080")

with Client(URL) as client:

    def changes() -> None:
        attempt = Attempt.generate("watch-demo")
        got = client.acquire("invoice-export", "order-77", attempt=attempt, ttl=30, holder="w-1")
        assert isinstance(got, Acquired)
        time.sleep(0.1)  # a demo: changes closer together than one read arrive as one event
        got.handle.renew(holder="w-2")
        time.sleep(0.1)
        got.handle.release()
        time.sleep(0.1)
        client.acquire("invoice-export", "order-77", attempt=Attempt.generate("short"), ttl=0.5)

    stream = client.watch("invoice-export", "order-77")
    first = next(stream)
    print(first.event, first.id, first.state.held)
    threading.Thread(target=changes).start()
    for event in stream:
        s = event.state
        print(event.event, event.id, s.held, s.holder, s.fencing_token)
        if event.event == "expired":
            break
    stream.close()
