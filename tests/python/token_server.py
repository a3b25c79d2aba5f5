"""A Microsoft identity stand-in on 127.0.0.1 for the identity tests: it answers the managed
identity endpoint (IMDS, `GET …/metadata/identity/oauth2/token`) and the Entra ID token endpoint
(`POST /{tenant}/oauth2/v2.0/token`, client secret or federated token), each with a bearer token
Azurite's `--oauth basic` mode accepts (audience https://storage.azure.com, a Microsoft issuer,
valid times; basic mode does not check the signature). Every request is logged, a JSON line each,
to LOG: the tests check which flow each client used and that expiring tokens were renewed.

    python token_server.py PORT LOG [EXPIRES_IN_SECONDS]
    python token_server.py --token                      # prints one token (container set-up)
"""

import base64
import json
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TENANT = "ab1f708d-50f6-404c-a006-d71b2ac7a606"


def b64(d):
    return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()


def token(lifetime):
    now = int(time.time())
    claims = {"aud": "https://storage.azure.com", "iss": f"https://sts.windows.net/{TENANT}/",
              "nbf": now - 60, "iat": now - 60, "exp": now + lifetime,
              "oid": "00000000-0000-0000-0000-000000000001", "tid": TENANT, "appid": "voxlake-test"}
    return b64({"alg": "RS256", "typ": "JWT"}) + "." + b64(claims) + ".c2lnbmF0dXJl"


def main():
    if sys.argv[1] == "--token":
        print(token(3600))
        return
    port, log, lifetime = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3600

    class Handler(BaseHTTPRequestHandler):
        def answer(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode()) if length else {}
            with open(log, "a") as f:
                f.write(json.dumps({"method": method, "path": self.path,
                                    "metadata": self.headers.get("Metadata"),
                                    "grant_type": form.get("grant_type", [None])[0],
                                    "client_assertion": form.get("client_assertion", [None])[0],
                                    "client_secret": form.get("client_secret", [None])[0]}) + "\n")
            now = int(time.time())
            body = json.dumps({"access_token": token(lifetime), "token_type": "Bearer",
                               "expires_in": lifetime, "expires_on": str(now + lifetime),
                               "resource": "https://storage.azure.com"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.answer("GET")

        def do_POST(self):
            self.answer("POST")

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
