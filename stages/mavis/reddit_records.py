"""Reddit records, checked field by field where they enter a stage: the rules shared by the two
MAVIS harvests (stages/mavis/harvest_pushshift.py reads dumps, harvest_reddit_live.py the API), so
a post or comment gets the same columns and the same reject reasons whichever source it came from.

Types accepted:
- `id`, `subreddit`, `link_id`: a non-empty string (absent or empty: missing_field);
- `title`, `selftext`, `url`, `permalink`, `body`, `parent_id`, `author`, gallery keys: a string or null;
- `created_utc`, `score`, `num_comments`: an int64, or null (read as 0); a decimal integer string
  and an integral float (the API's `1672531200.0`) are coerced, anything else is bad_field_type;
- `over_18`, `is_gallery`: a JSON boolean or null;
- `gallery_data` an object whose `items` is a list of objects, `media_metadata` an object of
  objects (`s` an object).
A gallery keeps its items in `gallery_data.items` order, urls from `media_metadata[id].s.u` (or
`.gif`) with `&amp;` unescaped; an item whose status is not `valid` or that has no metadata or url
is left out of the gallery (`image_urls(..., dropped=[])` says which and why:
gallery_item_failed, gallery_item_no_metadata), and a gallery left with no item is
gallery_without_valid_images.

`PlainPost` and `PlainComment` are the plain shape of a record, as msgspec types: a record that
decodes into one (every field it has of its plain type, ids non-empty, numbers in int64) reads
the same as the checks above read it, so it needs no further check; any other record goes through
the checks, which name its defect. Fields the harvests do not read are not decoded.
"""
from __future__ import annotations

import html
import re
from operator import itemgetter
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from stages.core.stage import Reject

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
# i.redd.it urls are most image posts: this prefix fixes the host without a urlsplit
_IREDDIT = ("https://i.redd.it/", "http://i.redd.it/")
# http(s)://host/path in characters urlsplit takes as they are (no query, fragment, port, user,
# brackets, spaces or controls): host and path read off directly, the same as urlsplit's
_PLAIN_URL = re.compile(r"https?://([-.0-9A-Za-z]*)(/[-!$%&'()*+,./0-9:;=@A-Z_a-z~]*)?")


_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
_Id = Annotated[str, msgspec.Meta(min_length=1)]


class _Source(msgspec.Struct, gc=False):
    u: str | None = None
    gif: str | None = None


class _Media(msgspec.Struct, gc=False):
    status: str | None  # required: an entry without it (`{}` included) is read by the checks
    s: _Source | None = None


class _GalleryItem(msgspec.Struct, gc=False):
    media_id: str | None = None


class _Gallery(msgspec.Struct, gc=False):
    items: list[_GalleryItem] | None = None


class PlainPost(msgspec.Struct, gc=False):
    """A post whose fields all have their plain types (absent = null = the checks' default),
    gallery keys included."""
    id: _Id
    subreddit: _Id
    title: str = ""
    selftext: str = ""
    url: str = ""
    is_gallery: bool = False
    author: str | None = None
    created_utc: _Int64 = 0
    score: _Int64 = 0
    num_comments: _Int64 = 0
    over_18: bool = False
    permalink: str = ""
    gallery_data: _Gallery | None = None
    media_metadata: dict[str, _Media] | None = None


class PlainComment(msgspec.Struct, gc=False):
    """A comment whose fields all have their plain types (absent = null = the checks' default)."""
    id: _Id
    link_id: _Id
    parent_id: str = ""
    body: str = ""
    score: _Int64 = 0
    author: str | None = None
    created_utc: _Int64 = 0


def _unescape(text: str) -> str:
    """html.unescape, without its regex pass for the one entity Reddit writes into urls (`&amp;`)."""
    if "&" not in text:
        return text
    return text.replace("&amp;", "&") if "&" not in text.replace("&amp;", "") else html.unescape(text)


# The reasons these checks reject with, shared by both harvests' `rejects`.
REDDIT_REJECTS = {
    "not_an_object": "the record is not a JSON object",
    "missing_field": "the record has no id, or no subreddit (post) or link_id (comment)",
    "bad_field_type": "a field holds a value of the wrong type (the detail names field, value and type)",
    "no_image": "the post is neither a gallery nor a direct image url",
    "gallery_without_valid_images": "a gallery post none of whose items is a valid image",
    "gallery_item_failed": "one item of a kept gallery post whose status is not valid (left out of the gallery)",
    "gallery_item_no_metadata": "one item of a kept gallery post without media metadata or a source url (left out)",
}


GALLERY_ITEM_REASONS = ("gallery_item_failed", "gallery_item_no_metadata")


def harvest_invariant(ctx) -> str | None:
    """Both harvests' count invariant: records read = posts + comments + rejected, less the
    dropped gallery items (rejects that are parts of kept posts, not records read)."""
    items = sum(ctx.rejected_by_reason[r] for r in GALLERY_ITEM_REASONS)
    out = ctx.rows_out("posts") + ctx.rows_out("comments")
    if ctx.rows_in != out + ctx.rejected - items:
        return f"records {ctx.rows_in} != posts and comments {out} + rejected {ctx.rejected - items} (besides {items} gallery items)"
    return None


def bad_field(field: str, value: object, expected: str) -> Reject:
    return Reject("bad_field_type", f"{field}={value!r:.200} ({type(value).__name__}, expected {expected})")


def int_field(record: dict, field: str) -> int:
    """An int64 field; null or absent is 0; a decimal string or an integral float is coerced."""
    value = record.get(field)
    if type(value) is int:
        if INT64_MIN <= value <= INT64_MAX:
            return value
    elif value is None:
        return 0
    elif type(value) is str and _INT_TEXT.fullmatch(value):
        number = int(value)
        if INT64_MIN <= number <= INT64_MAX:
            return number
    elif type(value) is float and value.is_integer() and -(2.0**63) <= value < 2.0**63:  # 2**63 - 1 rounds up as a float
        return int(value)
    raise bad_field(field, value, "an int64")


def _text(record: dict, field: str, empty: str | None = "") -> str | None:
    """A string field; null or absent is `empty`."""
    value = record.get(field)
    if type(value) is str:
        return value
    if value is None:
        return empty
    raise bad_field(field, value, "a string")


def _flag(record: dict, field: str) -> bool:
    value = record.get(field)
    if value is None:
        return False
    if type(value) is not bool:
        raise bad_field(field, value, "true, false or null")
    return value


def _object(container: dict, field: str, where: str) -> dict:
    value = container.get(field)
    if value is None:
        return {}
    if type(value) is not dict:
        raise bad_field(where, value, "an object")
    return value


def _gallery_urls(post: dict, dropped: list | None) -> list[str]:
    data = _object(post, "gallery_data", "gallery_data")
    items = data.get("items")
    if items is None:
        items = []
    elif type(items) is not list:
        raise bad_field("gallery_data.items", items, "a list")
    metadata = _object(post, "media_metadata", "media_metadata")
    urls = []
    for position, item in enumerate(items):
        if type(item) is not dict:
            raise bad_field("gallery_data.items[]", item, "an object")
        media_id = item.get("media_id")
        if media_id is None:
            if dropped is not None:
                dropped.append((f"item{position}", "gallery_item_no_metadata", f"gallery item {position} has no media_id"))
            continue
        if type(media_id) is not str:
            raise bad_field("gallery_data.items[].media_id", media_id, "a string")
        meta = _object(metadata, media_id, f"media_metadata.{media_id}")
        source = _object(meta, "s", f"media_metadata.{media_id}.s")
        url = _text(source, "u", None) or _text(source, "gif", None)
        _gallery_item(media_id, bool(meta), _text(meta, "status", None), url, urls, dropped)
    return urls


def _gallery_item(media_id: str, found: bool, status: str | None, url: str | None, urls: list, dropped: list | None) -> None:
    """One gallery item, read from a dict or a plain post: its url kept, or why it is dropped."""
    if status == "valid" and url:
        urls.append(_unescape(url))
    elif dropped is None:
        return
    elif not found:
        dropped.append((media_id, "gallery_item_no_metadata", f"{media_id}: not in media_metadata"))
    elif status != "valid":
        dropped.append((media_id, "gallery_item_failed", f"{media_id}: status {status!r}"))
    else:
        dropped.append((media_id, "gallery_item_no_metadata", f"{media_id}: valid but no source url"))


def plain_gallery_urls(post: PlainPost, dropped: list) -> list[str]:
    """`_gallery_urls` of a plain post: the same urls and dropped items."""
    items = post.gallery_data.items if post.gallery_data else None
    metadata = post.media_metadata or {}
    urls = []
    for position, item in enumerate(items or ()):
        media_id = item.media_id
        if media_id is None:
            dropped.append((f"item{position}", "gallery_item_no_metadata", f"gallery item {position} has no media_id"))
            continue
        meta = metadata.get(media_id)
        source = meta.s if meta is not None else None
        url = source.u or source.gif if source is not None else None
        _gallery_item(media_id, meta is not None, meta.status if meta is not None else None, url, urls, dropped)
    return urls


def image_urls(post: dict, extensions: tuple[str, ...], dropped: list | None = None) -> tuple[list[str], str | None]:
    """The post's image urls in display order, or ([], reject reason); raises Reject
    (bad_field_type) for a field of the wrong type. `dropped`, when given, receives
    (media_id, reason, detail) for each gallery item left out."""
    if _flag(post, "is_gallery"):
        urls = _gallery_urls(post, dropped)
        return (urls, None) if urls else ([], "gallery_without_valid_images")
    url = direct_image(_text(post, "url"), extensions)
    return ([url], None) if url else ([], "no_image")


def direct_image(url: str, extensions: tuple[str, ...]) -> str | None:
    """A non-gallery post's url, `&amp;` unescaped, when it is a direct image; else None."""
    if "&" in url:
        url = _unescape(url)
    if url.startswith(_IREDDIT):
        return url
    # a url without query or fragment whose path is not empty ends with its path: no urlsplit needed
    if url.lower().endswith(extensions) and "?" not in url and "#" not in url and "/" in url[url.find("//") + 2 :]:
        return url
    plain = _PLAIN_URL.fullmatch(url)
    if plain:
        host, path = plain.groups("")
    else:
        try:
            host, path = urlsplit(url)[1:3]
        except ValueError:  # a malformed host ("http://[x/page"): no image to fetch
            return None
    if host.lower() == "i.redd.it" or path.lower().endswith(extensions):
        return url
    return None


def record_id(record, required: str) -> str:
    """The id of a record (an object) that holds its id and `required` field as non-empty
    strings; raises Reject otherwise."""
    if type(record) is not dict:
        raise Reject("not_an_object", type(record).__name__)
    record_id = record.get("id")
    if not record_id or not record.get(required):
        raise Reject("missing_field", f"record without id or {required}")
    if type(record_id) is not str:
        raise bad_field("id", record_id, "a string")
    return record_id


post_fields_fast = itemgetter("title", "selftext", "url", "is_gallery", "author", "created_utc", "score", "num_comments",
                               "over_18", "permalink")


def post_fields(post: dict) -> tuple:
    """(title, selftext, url, is_gallery, author, created_utc, score, num_comments, over_18,
    permalink) of a post, every field checked and normalised; raises Reject. A post whose fields
    all have their plain types is read in one step (same values)."""
    try:
        fields = title, selftext, url, is_gallery, author, created, score, comments, over_18, permalink = post_fields_fast(post)
    except KeyError:
        fields = None
    if (fields and type(title) is str is type(selftext) is type(url) is type(permalink) and type(is_gallery) is bool is type(over_18)
            and type(created) is int is type(score) is type(comments) and (author is None or type(author) is str)
            and INT64_MIN <= created <= INT64_MAX and INT64_MIN <= score <= INT64_MAX and INT64_MIN <= comments <= INT64_MAX):
        return fields
    return (_text(post, "title"), _text(post, "selftext"), _text(post, "url"), _flag(post, "is_gallery"), _text(post, "author", None),
            int_field(post, "created_utc"), int_field(post, "score"), int_field(post, "num_comments"), _flag(post, "over_18"), _text(post, "permalink"))


def comment_fields(comment) -> tuple:
    """(id, link_id, parent_id, body, score, author, created_utc) of a comment, every field
    checked and normalised (null text is "", null numbers 0); raises Reject."""
    comment_id = record_id(comment, "link_id")
    link_id = comment["link_id"]
    if type(link_id) is not str:
        raise bad_field("link_id", link_id, "a string")
    return (comment_id, link_id, _text(comment, "parent_id"), _text(comment, "body"), int_field(comment, "score"),
            _text(comment, "author", None), int_field(comment, "created_utc"))
