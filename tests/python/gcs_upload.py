"""Uploads a local folder (a Delta table) to the GCS emulator through its JSON API, each file
under PREFIX/ (object_store's client uploads through the XML API, which the emulator lacks).

    python gcs_upload.py ENDPOINT BUCKET PREFIX FOLDER    # prints the number of files
"""

import os
import sys
import urllib.parse
import urllib.request

endpoint, bucket, prefix, folder = sys.argv[1:5]
count = 0
for root, _, files in os.walk(folder):
    for name in sorted(files):
        path = os.path.join(root, name)
        key = f"{prefix}/{os.path.relpath(path, folder)}"
        with open(path, "rb") as f:
            data = f.read()
        url = (f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media"
               f"&name={urllib.parse.quote(key, safe='')}")
        urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST")).read()
        count += 1
print(count)
