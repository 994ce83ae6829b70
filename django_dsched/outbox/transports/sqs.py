"""Amazon SQS, and servers that speak its API, through boto3 (``pip install django-dsched[sqs]``).

Options: ``QUEUE_URL`` (required; ``{topic}``, ``{type}`` and ``{host}`` may stand in the queue's
name, the URL's last path segment, filled in percent-encoded, so a ``/`` in a topic never
reaches the URL's path: a name SQS would refuse is a dead letter; on a route that serves hosts
besides the operator's, ``{host}`` must come before ``{topic}`` and ``{type}``, system check
``dsched.E051``), ``REGION`` (default: the region in an AWS queue URL, else boto3's own
chain: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, the config file), ``ENDPOINT_URL`` (the server
for an SQS-compatible queue URL; default the region's AWS endpoint), ``ACCESS_KEY_ID`` and
``SECRET_ACCESS_KEY`` (together, or neither: boto3's credential chain, from the environment, the
shared files, a container or instance role), ``TIMEOUT`` (seconds for connecting and for each
read of a request, default 10; under a quarter of ``DSCHED_RELAY_VISIBILITY_TIMEOUT``),
``MESSAGE_GROUP_ID`` (FIFO queues; default ``{schedule}``, the schedule's id, so one schedule's
messages keep their order; ``{topic}``, ``{type}`` and ``{host}`` too), ``MAX_MESSAGE_BYTES``
(default 262,144, 256 KiB; at most SQS's 1 MiB: set it to your queue's ``MaximumMessageSize``).

A batch of the relay goes in ``SendMessageBatch`` calls of up to 10 messages and at most
``MAX_MESSAGE_BYTES`` together; a message counts as delivered once SQS's reply lists it as
successful with the MD5 of the body sent. Each message's outcome is its own entry of the reply.

* Body: the CloudEvents envelope as JSON, as every transport sends it (U+FFFE and U+FFFF, which
  SQS refuses in a body, are written as JSON escapes: the same JSON value).
* Message attributes (strings): ``id`` (the idempotency key), ``type``, ``topic``, and the
  envelope's ``source``, ``subject`` (the schedule), ``time``, ``scheduledtime`` and
  ``specversion`` when it has them: 8 of SQS's 10.
* FIFO queues (a queue name ending in ``.fifo``): ``MessageDeduplicationId`` = the message id,
  ``MessageGroupId`` from ``MESSAGE_GROUP_ID``.
* A message larger than ``MAX_MESSAGE_BYTES`` (body and attributes, as SQS counts them), one SQS
  refuses for its content, or a rendered queue name or group id SQS would refuse, is a
  permanent failure (a dead letter at once). A queue that does not exist, refused credentials,
  throttling, an endpoint that cannot be reached or does not answer within ``TIMEOUT``: a
  failed attempt, retried. After an endpoint could not be reached, the sends of the next
  ``TIMEOUT`` seconds fail at once with that error, so a relay's batch waits on a silent
  endpoint once, not once per call of 10.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from django_dsched import __version__
from django_dsched.conf import app_settings
from django_dsched.exceptions import DeliveryError, PermanentDeliveryError
from django_dsched.outbox.messages import Message
from django_dsched.outbox.transports.base import (
    Problem,
    Transport,
    destination_problem,
    encode,
    render,
)

# SQS's bounds.
MAX_BATCH = 10  # messages in one SendMessageBatch
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
LARGEST_MESSAGE_BYTES = 1024 * 1024  # the largest MaximumMessageSize a queue can have
SMALLEST_MESSAGE_BYTES = 1024
# A queue name: letters, digits, '-' and '_', with '.fifo' at most 80 characters.
QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}\Z")
# A group id: 1 to 128 letters, digits and punctuation (printable ASCII but the space).
GROUP_ID = re.compile(r"[!-~]{1,128}\Z")
# Characters SQS refuses in a body or a string attribute (it takes #x9 #xA #xD, #x20-#xD7FF,
# #xE000-#xFFFD, #x10000-#x10FFFF).
REFUSED_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# The two JSON text may hold raw that SQS refuses (compact JSON escapes control characters,
# and PostgreSQL's jsonb holds no lone surrogate): written as JSON escapes, the same value.
NONCHARACTERS = {0xFFFE: "\\ufffe", 0xFFFF: "\\uffff"}
# The envelope's fields copied into string attributes, after id, type and topic.
ENVELOPE_ATTRIBUTES = ("source", "subject", "time", "scheduledtime", "specversion")
QUEUE_PLACEHOLDERS = ("{topic}", "{type}", "{host}")
GROUP_PLACEHOLDERS = ("{schedule}", "{topic}", "{type}", "{host}")
# Error codes about one message's content: when a server refuses a whole batch with one of them
# (some check every entry before sending any), each message is sent alone, and a message refused
# alone with one of them is a permanent failure. Any other refusal (a missing queue, access
# denied, throttling) fails the batch for a retry.
MESSAGE_REFUSED = frozenset(
    {
        "InvalidParameterValue",
        "InvalidMessageContents",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "MissingParameter",
        "BatchRequestTooLong",
    }
)
# An AWS endpoint's host, and the region in it: sqs.<region>.amazonaws.com(.cn),
# sqs-fips.<region>.amazonaws.com, <region>.queue.amazonaws.com, sqs.<region>.api.aws.
AWS_HOST = re.compile(r".*\.(amazonaws\.com|amazonaws\.com\.cn|api\.aws)\Z")
REGION_IN_HOST = re.compile(
    r"(?:sqs(?:-fips)?\.)?(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)"
    r"\.(?:queue\.amazonaws\.com|amazonaws\.com|amazonaws\.com\.cn|api\.aws)\Z"
)


class Entry(NamedTuple):
    """One message as a SendMessageBatch entry (without its ``Id``)."""

    position: int  # in the relay's batch
    queue_url: str
    request: dict[str, Any]
    size: int  # bytes as SQS counts them: body, attribute names, types and values
    md5: str  # of the body, as SQS's reply states it


def region_of(url: str) -> str | None:
    """The region in an AWS queue URL's host; None for other hosts."""
    match = REGION_IN_HOST.match((urlsplit(url).hostname or "").lower())
    return match["region"] if match else None


def queue_name_problem(name: str) -> str | None:
    """Why SQS would refuse ``name`` as a queue's name; None if it would not."""
    base = name.removesuffix(".fifo")
    if len(name) > 80 or not QUEUE_NAME.match(base):
        return (
            f"{name!r} is not an SQS queue name (letters, digits, '-' and '_', with '.fifo' "
            "at most 80 characters)"
        )
    return None


def queue_url_problems(url: str) -> list[str]:
    """What is wrong with a ``QUEUE_URL`` (placeholders in the queue's name only)."""
    static = url
    for placeholder in QUEUE_PLACEHOLDERS:
        static = static.replace(placeholder, "x")
    parts = urlsplit(static)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [f"QUEUE_URL {url!r} is not an http(s) URL"]
    if parts.query or parts.fragment:
        return [f"QUEUE_URL {url!r} may not have a query or a fragment"]
    if len(parts.path.strip("/").split("/")) < 2:
        return [f"QUEUE_URL {url!r} is not a queue's URL (http(s)://host/<account>/<name>)"]
    if any(p in url.rpartition("/")[0] for p in QUEUE_PLACEHOLDERS):
        return [
            f"QUEUE_URL {url!r}: {{topic}}, {{type}} and {{host}} may stand only in the queue's "
            "name, the URL's last path segment"
        ]
    problem = queue_name_problem(static.rpartition("/")[2])
    return [f"QUEUE_URL: {problem}"] if problem else []


def string_attributes(message: Message) -> dict[str, dict[str, str]]:
    """The message's attributes: non-empty strings SQS takes (others are left out)."""
    payload = message.payload
    values: dict[str, Any] = {
        "id": str(message.id),
        "type": message.event_type,
        "topic": message.topic,
        **{name: payload.get(name) for name in ENVELOPE_ATTRIBUTES},
    }
    return {
        name: {"DataType": "String", "StringValue": value}
        for name, value in values.items()
        if isinstance(value, str) and value and not REFUSED_TEXT.search(value)
    }


def batches(entries: Sequence[Entry], max_bytes: int) -> Iterator[list[Entry]]:
    """``entries`` in calls of at most 10 messages and ``max_bytes`` together."""
    batch: list[Entry] = []
    size = 0
    for entry in entries:
        if batch and (len(batch) == MAX_BATCH or size + entry.size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += entry.size
    if batch:
        yield batch


def error_code(exc: Any) -> str:
    """The SQS error code of a botocore ``ClientError`` (the query protocol's name)."""
    error = getattr(exc, "response", {}).get("Error", {})
    code = str(error.get("QueryErrorCode") or error.get("Code") or "Unknown")
    return code.removeprefix("AWS.SimpleQueueService.")


def entry_failure(failed: Mapping[str, Any], queue_url: str) -> DeliveryError:
    """A ``Failed`` entry of SQS's reply as the message's failure: permanent when SQS refused
    the message itself (the sender's fault, a code about its content), else retryable."""
    code = str(failed.get("Code") or "Unknown").removeprefix("AWS.SimpleQueueService.")
    text = f"SQS refused the message for {queue_url}: {code}: {failed.get('Message') or ''}"
    if failed.get("SenderFault") and code in MESSAGE_REFUSED:
        return PermanentDeliveryError(text)
    return DeliveryError(text)


class SQSTransport(Transport):
    alias = "sqs"
    requires = ("boto3", "boto3", "sqs")
    batch_size = MAX_BATCH
    # SendMessageBatch calls at once (boto3's clients are safe to share across threads).
    concurrency = 4
    options = frozenset(
        {
            "QUEUE_URL",
            "REGION",
            "ENDPOINT_URL",
            "ACCESS_KEY_ID",
            "SECRET_ACCESS_KEY",
            "TIMEOUT",
            "MESSAGE_GROUP_ID",
            "MAX_MESSAGE_BYTES",
        }
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        import boto3
        from botocore.config import Config

        self.queue_url: str = options["QUEUE_URL"]
        self.timeout = float(options.get("TIMEOUT", 10.0))
        self.max_bytes = int(options.get("MAX_MESSAGE_BYTES", DEFAULT_MAX_MESSAGE_BYTES))
        self.group_id: str = options.get("MESSAGE_GROUP_ID", "{schedule}")
        # When the endpoint last could not be reached, and why (see _unreachable).
        self._down: tuple[float, BaseException] | None = None
        # A session of its own: boto3's default session is not safe to share across threads
        # (a scheduler's --with-relay thread, the test suite's relays).
        session = boto3.session.Session(
            aws_access_key_id=options.get("ACCESS_KEY_ID"),
            aws_secret_access_key=options.get("SECRET_ACCESS_KEY"),
            region_name=options.get("REGION") or region_of(self.queue_url),
        )
        self.client: Any = session.client(
            "sqs",
            endpoint_url=options.get("ENDPOINT_URL"),
            config=Config(
                connect_timeout=self.timeout,
                read_timeout=self.timeout,
                # One request per call: the relay retries, with its backoff and its limits.
                retries={"total_max_attempts": 1, "mode": "standard"},
                user_agent_extra=f"django-dsched/{__version__}",
            ),
        )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = super().check_options(options)
        if missing := cls.missing_library():
            return [*problems, *missing]
        import boto3

        url = options.get("QUEUE_URL")
        url_problems = ["QUEUE_URL (a string) is required"]
        if isinstance(url, str) and url:
            url_problems = queue_url_problems(url)
        problems.extend(url_problems)
        url = url if not url_problems else None
        endpoint = options.get("ENDPOINT_URL")
        if endpoint is not None:
            parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"ENDPOINT_URL {endpoint!r} is not an http(s) URL")
        elif url is not None and not AWS_HOST.match((urlsplit(url).hostname or "").lower()):
            problems.append(
                f"QUEUE_URL's host {urlsplit(url).hostname!r} is not an AWS endpoint: set "
                "ENDPOINT_URL to the server that serves the queue (boto3 sends every request "
                "to ENDPOINT_URL, by default the region's AWS endpoint)"
            )
        region = options.get("REGION")
        in_url = region_of(url) if url is not None else None
        if region is not None and not (isinstance(region, str) and region):
            problems.append("REGION must be a region name such as 'eu-west-1'")
        elif region and in_url and region != in_url:
            problems.append(f"REGION {region!r} is not the region of QUEUE_URL ({in_url!r})")
        elif url and not region and not in_url and not boto3.session.Session().region_name:
            problems.append(
                "no region: set REGION (or AWS_DEFAULT_REGION, or the AWS config file's region)"
            )
        keys = [options.get(name) for name in ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY")]
        if any(key is not None for key in keys) and not all(
            isinstance(key, str) and key for key in keys
        ):
            problems.append(
                "give ACCESS_KEY_ID and SECRET_ACCESS_KEY together, as strings (or neither: "
                "boto3's credential chain)"
            )
        timeout = options.get("TIMEOUT", 10.0)
        visibility = app_settings.RELAY_VISIBILITY_TIMEOUT
        if not (isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0):
            problems.append("TIMEOUT must be a positive number of seconds")
        elif isinstance(visibility, int | float) and timeout * 4 >= visibility:
            problems.append(
                f"TIMEOUT ({timeout}s) must be less than a quarter of "
                f"DSCHED_RELAY_VISIBILITY_TIMEOUT ({visibility}s): a request may connect and "
                "then wait for the reply, each up to TIMEOUT, and must end within half the "
                "visibility timeout"
            )
        size = options.get("MAX_MESSAGE_BYTES", DEFAULT_MAX_MESSAGE_BYTES)
        if not (
            isinstance(size, int)
            and not isinstance(size, bool)
            and SMALLEST_MESSAGE_BYTES <= size <= LARGEST_MESSAGE_BYTES
        ):
            problems.append(
                f"MAX_MESSAGE_BYTES must be a whole number from {SMALLEST_MESSAGE_BYTES} to "
                f"{LARGEST_MESSAGE_BYTES} (SQS's bounds for a queue's MaximumMessageSize)"
            )
        group = options.get("MESSAGE_GROUP_ID", "{schedule}")
        if not isinstance(group, str):
            problems.append("MESSAGE_GROUP_ID must be a string")
        else:
            static = group
            for placeholder in GROUP_PLACEHOLDERS:
                static = static.replace(placeholder, "x")
            if "{" in static or "}" in static:
                problems.append(
                    f"MESSAGE_GROUP_ID {group!r}: the placeholders are {{schedule}}, {{topic}}, "
                    "{type} and {host}"
                )
            elif not GROUP_ID.match(static):
                problems.append(
                    f"MESSAGE_GROUP_ID {group!r}: SQS takes 1 to 128 letters, digits and "
                    "punctuation"
                )
        return problems

    @classmethod
    def tenancy_problems(cls, options: Mapping[str, Any], *, shared: bool) -> list[Problem]:
        url = options.get("QUEUE_URL")
        return destination_problem("QUEUE_URL", url) if shared else []

    # -- one message -------------------------------------------------------------------------
    def entry(self, index: int, message: Message) -> Entry:
        """The message as a batch entry; :class:`PermanentDeliveryError` if SQS never takes it."""
        base, _, name = self.queue_url.rpartition("/")
        queue_url = f"{base}/{render(name, message, lambda value: quote(value, safe=''))}"
        problem = queue_name_problem(queue_url.rpartition("/")[2])
        if problem:
            raise PermanentDeliveryError(f"QUEUE_URL for topic {message.topic!r}: {problem}")
        body = encode(message).decode().translate(NONCHARACTERS)
        data = body.encode()
        attributes = string_attributes(message)
        size = len(data) + sum(
            len(name.encode()) + len(value["DataType"]) + len(value["StringValue"].encode())
            for name, value in attributes.items()
        )
        if size > self.max_bytes:
            raise PermanentDeliveryError(
                f"the message is {size:,} bytes (body and attributes, as SQS counts them), over "
                f"MAX_MESSAGE_BYTES ({self.max_bytes:,}): SQS would refuse it, so it is not "
                "retried"
            )
        request: dict[str, Any] = {"MessageBody": body, "MessageAttributes": attributes}
        if queue_url.endswith(".fifo"):
            request["MessageDeduplicationId"] = str(message.id)
            request["MessageGroupId"] = self.message_group_id(message)
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        return Entry(index, queue_url, request, size, md5)

    def message_group_id(self, message: Message) -> str:
        """``MESSAGE_GROUP_ID`` filled in: ``{schedule}`` is the envelope's ``subject`` (the
        schedule's id), or the topic for a message without one."""
        subject = message.payload.get("subject")
        schedule = subject if isinstance(subject, str) and subject else message.topic
        group = render(self.group_id.replace("{schedule}", schedule), message, cache=False)
        if not GROUP_ID.match(group):
            raise PermanentDeliveryError(
                f"MESSAGE_GROUP_ID gives {group!r}: SQS takes 1 to 128 letters, digits and "
                "punctuation"
            )
        return group

    # -- sending -----------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        (error,) = self.send_many([message])
        if error is not None:
            raise error

    def send_many(self, messages: Sequence[Message]) -> list[BaseException | None]:
        results: list[BaseException | None] = [None] * len(messages)
        queues: dict[str, list[Entry]] = {}
        for index, message in enumerate(messages):
            try:
                entry = self.entry(index, message)
            except Exception as exc:
                results[index] = exc
            else:
                queues.setdefault(entry.queue_url, []).append(entry)
        for queue_url, entries in queues.items():
            for batch in batches(entries, self.max_bytes):
                skipped = self._unreachable()
                if skipped is not None:
                    for entry in batch:
                        results[entry.position] = skipped
                    continue
                down = self._send_batch(queue_url, batch, results)
                if down is not None:
                    self._down = (time.monotonic(), down)
        return results

    def _unreachable(self) -> DeliveryError | None:
        """The error to fail a call with, without making it, while the endpoint could not be
        reached less than ``TIMEOUT`` seconds ago: a relay's batch of many calls then waits on
        a silent endpoint once, not once per call."""
        if self._down is None:
            return None
        age = time.monotonic() - self._down[0]
        if age >= self.timeout:
            self._down = None
            return None
        return DeliveryError(f"not sent: the endpoint failed {age:.1f}s ago: {self._down[1]}")

    def _send_batch(
        self, queue_url: str, batch: list[Entry], results: list[BaseException | None]
    ) -> BaseException | None:
        """One ``SendMessageBatch``; records each entry's outcome in ``results``. Returns the
        error when the endpoint could not be reached (or answered nothing usable)."""
        from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

        try:
            reply = self.client.send_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": f"m{i}", **entry.request} for i, entry in enumerate(batch)],
            )
        except ClientError as exc:
            code = error_code(exc)
            if code in MESSAGE_REFUSED and len(batch) > 1:
                # The server refused the whole call for one message's sake: send each alone,
                # so that message fails alone. Nothing of a refused call was sent.
                down: BaseException | None = None
                for entry in batch:
                    if down is None:
                        down = self._send_batch(queue_url, [entry], results)
                    else:
                        results[entry.position] = down
                return down
            message = exc.response.get("Error", {}).get("Message") or ""
            text = f"SQS refused the send to {queue_url}: {code}: {message}"
            error = (PermanentDeliveryError if code in MESSAGE_REFUSED else DeliveryError)(text)
            for entry in batch:
                results[entry.position] = error
            return None
        except Exception as exc:  # botocore: no connection, a timeout, no credentials
            timed_out = isinstance(exc, ConnectTimeoutError | ReadTimeoutError)
            text = f"{type(exc).__name__}: {exc}"
            failure = DeliveryError(text + (f" (TIMEOUT {self.timeout:g}s)" if timed_out else ""))
            failure.__cause__ = exc
            for entry in batch:
                results[entry.position] = failure
            return failure
        succeeded = {item.get("Id"): item for item in reply.get("Successful") or ()}
        failed = {item.get("Id"): item for item in reply.get("Failed") or ()}
        for i, entry in enumerate(batch):
            key = f"m{i}"
            outcome: BaseException | None
            if key in failed:
                outcome = entry_failure(failed[key], queue_url)
            elif key not in succeeded:
                outcome = DeliveryError(f"SQS's reply from {queue_url} does not list the message")
            elif succeeded[key].get("MD5OfMessageBody", entry.md5) != entry.md5:
                outcome = DeliveryError(
                    f"SQS's reply from {queue_url} states another body's MD5 than the one sent"
                )
            else:
                outcome = None
            results[entry.position] = outcome
        return None

    def close(self) -> None:
        self.client.close()
