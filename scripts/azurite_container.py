"""Creates a blob container in Azurite with a SharedKey-signed PUT (object_store cannot create
containers). Uses the emulator's well-known development account and key.

usage: azurite_container.py BLOB_URL CONTAINER      e.g. http://127.0.0.1:10000 voxlake-test
"""

import base64
import hashlib
import hmac
import sys
import urllib.error
import urllib.request
from email.utils import formatdate

ACCOUNT = "devstoreaccount1"
# The documented Azurite development key (public, emulator only).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
VERSION = "2021-08-06"


def main() -> None:
    blob_url, container = sys.argv[1].rstrip("/"), sys.argv[2]
    date = formatdate(usegmt=True)
    headers = {"x-ms-date": date, "x-ms-version": VERSION, "Content-Length": "0"}
    # SharedKey string-to-sign: verb, 11 standard headers (Content-Length empty when 0),
    # canonicalized x-ms-* headers, canonicalized resource.
    canonical_headers = f"x-ms-date:{date}\nx-ms-version:{VERSION}\n"
    canonical_resource = f"/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
    string_to_sign = "PUT\n" + "\n" * 11 + canonical_headers + canonical_resource
    signature = base64.b64encode(
        hmac.new(base64.b64decode(KEY), string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    headers["Authorization"] = f"SharedKey {ACCOUNT}:{signature}"
    url = f"{blob_url}/{ACCOUNT}/{container}?restype=container"
    # No body: urllib would add a form Content-Type for one, which is part of the signature.
    req = urllib.request.Request(url, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 201, resp.status
    except urllib.error.HTTPError as e:
        if e.code != 409:  # already exists
            sys.exit(f"creating container {container}: HTTP {e.code} {e.read().decode()[:300]}")
    print(f"container {container} ready at {blob_url}")


if __name__ == "__main__":
    main()
