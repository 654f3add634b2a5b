"""Storage settings for tests: the default storage on an S3-speaking server."""

from __future__ import annotations


def point_storage_at_s3(settings, endpoint: str, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """The default storage on `bucket` of the S3 server at `endpoint`, as production configures it."""
    settings.LEPUS_S3_BUCKET = bucket
    settings.LEPUS_S3_ENDPOINT_URL = endpoint
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": endpoint,
                "region_name": "us-east-1",
                "querystring_auth": True,
                "querystring_expire": settings.LEPUS_MEDIA_URL_TTL,
                "file_overwrite": True,
                "addressing_style": "path",
                "signature_version": "s3v4",
            },
        },
    }
