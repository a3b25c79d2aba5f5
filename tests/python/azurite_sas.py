"""Prints an account SAS token for Azurite's well-known development account (blob service,
all resource types), signed with its documented key: the tests' SAS credential.

usage: azurite_sas.py [PERMISSIONS=rwdlac]
"""

import base64
import datetime
import hashlib
import hmac
import sys
from urllib.parse import urlencode

ACCOUNT = "devstoreaccount1"
# The documented Azurite development key (public, emulator only).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
VERSION = "2021-08-06"


def account_sas(permissions: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    start = (now - datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    expiry = (now + datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    service, resource_types, protocols = "b", "sco", "http,https"
    # Account SAS string-to-sign (2020-12-06 and later): the fields, then an empty encryption
    # scope, each followed by a newline.
    fields = [ACCOUNT, permissions, service, resource_types, start, expiry, "", protocols, VERSION, ""]
    to_sign = "\n".join(fields) + "\n"
    signature = base64.b64encode(
        hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    return urlencode(
        {"sv": VERSION, "ss": service, "srt": resource_types, "sp": permissions, "st": start,
         "se": expiry, "spr": protocols, "sig": signature}
    )


if __name__ == "__main__":
    print(account_sas(sys.argv[1] if len(sys.argv) > 1 else "rwdlac"))
