"""Create the sandbox bucket in MinIO unless it exists. Never deletes or empties anything.

Run once per ``docker compose up`` by the ``minio-init`` service, configured by
OSL_S3_ENDPOINT, OSL_S3_ACCESS_KEY, OSL_S3_SECRET_KEY and OSL_BUCKET.
"""

from __future__ import annotations

import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError


def main() -> int:
    endpoint = os.environ["OSL_S3_ENDPOINT"]
    bucket = os.environ["OSL_BUCKET"]
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=os.environ["OSL_S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["OSL_S3_SECRET_KEY"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, connect_timeout=3, read_timeout=10),
    )
    last: Exception | None = None
    for _ in range(30):  # MinIO is healthy before this runs; retries cover a slow first start
        try:
            existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            if bucket in existing:
                print(f"ensure_bucket: s3://{bucket} already exists at {endpoint}; left as is")
                return 0
            client.create_bucket(Bucket=bucket)
            print(f"ensure_bucket: created s3://{bucket} at {endpoint}")
            return 0
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                print(f"ensure_bucket: s3://{bucket} already exists at {endpoint}; left as is")
                return 0
            last = exc
            if code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"):
                break  # wrong credentials do not get better by waiting
        except BotoCoreError as exc:
            last = exc
        time.sleep(2)
    print(
        f"ensure_bucket: could not create s3://{bucket} at {endpoint}: {last}; check the minio "
        f"service (`docker compose logs minio`) and that OSL_S3_ACCESS_KEY/OSL_S3_SECRET_KEY match it",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
