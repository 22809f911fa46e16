"""A webhook receiver for UndoLog's approval requests (docs/tutorials/notifications.md):
it checks the signature, refuses a stale or tampered body, and announces each request
once. Standard library only, as a receiver in any language could be.

    HOOK_SECRET=... python examples/webhook_receiver.py 8080
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# --8<-- [start:verify]
SECRET = os.environ["HOOK_SECRET"].encode()
TOLERANCE = 300  # seconds: a body replayed later than this is refused


def signed(header: str, body: bytes) -> bool:
    """X-UndoLog-Signature is "t=<unix seconds>,v1=<hex>", where <hex> is
    HMAC-SHA256(secret, "<unix seconds>." + body)."""
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > TOLERANCE:
        return False
    expected = hmac.new(SECRET, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given)


# --8<-- [end:verify]
seen: set[str] = set()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not signed(self.headers.get("X-UndoLog-Signature", ""), body):
            self.send_response(401)
            self.end_headers()
            return
        # a delivery sent again (its worker died before recording it) has the same id
        delivery = self.headers.get("X-UndoLog-Delivery", "")
        if delivery not in seen:
            seen.add(delivery)
            event = json.loads(body)
            print(f"{event['tool_name']} {event['args']} waits: {event['url']}", flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()
