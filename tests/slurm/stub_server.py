"""A stand-in for ``vllm serve`` in Slurm server jobs: answers ``GET /health`` (200) and
``GET /v1/models`` (its served names, as vLLM lists each of several) on ``--port``, after
``--delay`` seconds; nothing else.
Run as ``python stub_server.py --port P --served-model-name NAME [NAME ...] [--delay S]``."""

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", nargs="+", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    models = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}
                                                    for name in args.served_model_name]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/health": b"", "/v1/models": models}.get(self.path)
            self.send_response(404 if body is None else 200)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):  # keep the job's log to the lines the tests look for
            pass

    time.sleep(args.delay)
    print(f"stub server listening on {args.port}", flush=True)
    ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
