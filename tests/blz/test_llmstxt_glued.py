"""Concatenated pages glued together: a closing fence with the next page's first text on the same line
(```` ```[Skip to content](https://…) ````), "Skip to content" page markers, and closers glued to a link,
a heading or a sentence. Synthetic cases only: each page's headings must survive, and no line inside a
code block may become a heading."""

from __future__ import annotations

import pytest

from cairn_servers.blz.llmstxt import parse


def heads(text: str) -> list[tuple[int, int, str]]:
    return [(h.line, h.level, h.text) for h in parse(text).headings]


def page(title: str, url: str, closer: str = "```") -> str:
    """A scraped page: a permalinked H1, a section ending in a fenced block with comment lines, and
    the closing fence (``closer``: what the next page may be glued to)."""
    return (f"# {title} [¶]({url}#top)\n\nAbout {title.lower()}, in a few words here.\n\n## {title} setup\n\n"
            f"```bash\n# install {title.lower()}\nnpm install {title.lower()}\n## not a heading\n{closer}")


def test_a_closing_fence_glued_to_a_skip_to_content_link_closes_and_starts_a_page() -> None:
    text = (page("Alpha", "https://site.dev/alpha", "```[Skip to content](https://site.dev/beta#_top)")
            + "\n\n# Beta\n\nBeta's text is here.\n\n## Beta one\n\n```js\nconst x = 1; // # no\n```\n\n"
            "## Beta two\n\nBody.\n")
    doc = parse(text)
    assert heads(text) == [(1, 1, "Alpha"), (5, 2, "Alpha setup"), (13, 1, "Beta"), (17, 2, "Beta one"),
                           (23, 2, "Beta two")]
    second = doc.pages[1]
    assert (second.start, second.url) == (11, "https://site.dev/beta")  # the marker's line starts the page
    assert doc.headings[1].end == 10  # Alpha's last section ends before the glued line
    beta = next(s for s in doc.sections if s.heading == "Beta one")
    assert beta.path == ("Beta", "Beta one")


def test_skip_to_content_markers_end_a_fence_left_open() -> None:
    # Alpha's block never closes; each page starts with its marker on a line of its own.
    text = ("[Skip to content](#_top)\n\n# Alpha\n\n```sh\n# comment\nrun alpha\n\n"
            "Skip to content\n\n# Beta\n\nText.\n\n## Beta usage\n\n```sh\n# comment\n```\n\n"
            "[Skip to main content](https://site.dev/gamma)\n\n# Gamma\n\n## Gamma usage\n\nText.\n")
    doc = parse(text)
    assert heads(text) == [(3, 1, "Alpha"), (11, 1, "Beta"), (15, 2, "Beta usage"), (23, 1, "Gamma"),
                           (25, 2, "Gamma usage")]
    assert [p.start for p in doc.pages] == [1, 9, 21] and doc.pages[2].url == "https://site.dev/gamma"


@pytest.mark.parametrize("glued", [
    "[Next: Routing](https://site.dev/routing)",
    "[](https://site.dev/routing#x)",
    "Next, install the command line tool with npm.",
])
def test_a_closing_fence_glued_to_text_is_a_close_plus_text(glued: str) -> None:
    text = page("Alpha", "https://site.dev/alpha", "```" + glued) + "\n\n## Routing\n\nRoutes.\n\n" \
        "```py\n# a comment\n```\n\n## After\n\nEnd.\n"
    assert heads(text) == [(1, 1, "Alpha"), (5, 2, "Alpha setup"), (13, 2, "Routing"), (21, 2, "After")]


def test_a_heading_glued_to_a_closing_fence_is_a_heading() -> None:
    text = page("Alpha", "https://site.dev/alpha", "```# Beta") + "\n\nBeta text.\n\n## Beta one\n\nMore.\n"
    assert heads(text) == [(1, 1, "Alpha"), (5, 2, "Alpha setup"), (11, 1, "Beta"), (15, 2, "Beta one")]


def test_a_glued_closer_without_its_opener_opens_nothing() -> None:
    # The parser lost the opener (no fence before): the glued line must not open a block.
    text = "# Alpha\n\nText.\n```[Skip to content](https://site.dev/b)\n\n# Beta\n\n## Beta one\n\nText.\n"
    assert heads(text) == [(1, 1, "Alpha"), (6, 1, "Beta"), (8, 2, "Beta one")]


def test_info_strings_and_shorter_fences_are_not_glued_text() -> None:
    text = """# Doc

````md
```[link](https://x.dev)
# inside a four-backtick block
```
## still inside
````

```js title="app.js" {1,3}
# not a heading
```

~~~
```[Skip to content is text in a tilde block](x)
# not a heading either
~~~

```html
<a href="#main">Skip to content</a>
# still code
```

## End
"""
    assert heads(text) == [(1, 1, "Doc"), (24, 2, "End")]


def test_plain_language_info_strings_still_open_blocks() -> None:
    for info in ("python", "ts twoslash", "Dockerfile", "C++", "sh Terminal"):
        text = f"# Doc\n\n```{info}\n# comment\n```\n\n## End\n"
        assert heads(text) == [(1, 1, "Doc"), (7, 2, "End")], info


BROKEN = """# Alpha [¶](https://site.dev/alpha#alpha)

About alpha, in a few words here.

## Setup [¶](#setup)

```js
const a = 1;

Alpha's text goes on after a code block whose closer was lost.

```
npm run alpha
```

# Beta

Beta is the next page, and this is its first sentence.

## Beta one [¶](#beta-one)

```py
# a comment, not a heading
```

## Beta two [¶](#beta-two)

End.
"""


def test_a_plain_title_after_a_code_block_starts_a_page_where_headings_are_marked() -> None:
    # Alpha's lost closer shifts every fence after it: the block before "# Beta" reads as opening
    # one, which used to hide Beta's headings until its first code block.
    assert heads(BROKEN) == [(1, 1, "Alpha"), (5, 2, "Setup"), (16, 1, "Beta"), (20, 2, "Beta one"),
                             (26, 2, "Beta two")]
    assert [p.start for p in parse(BROKEN).pages] == [1, 16]


@pytest.mark.parametrize("change", ["no markers", "no code before", "no sentence after", "markdown sample"])
def test_a_plain_title_needs_every_sign(change: str) -> None:
    if change == "no markers":  # a site that does not mark its headings: the fences are read as before
        text = BROKEN.replace(" [¶](https://site.dev/alpha#alpha)", "").replace(" [¶](#setup)", "")
        assert len(parse(text).pages) == 1
    elif change == "no code before":
        text = BROKEN.replace("npm run alpha\n```\n\n# Beta", "npm run alpha\n```\n\nSome text.\n\n# Beta")
        assert len(parse(text).pages) == 1
    elif change == "no sentence after":
        text = BROKEN.replace("Beta is the next page, and this is its first sentence.", "npm install beta")
        assert len(parse(text).pages) == 1
    else:  # a Markdown sample in a code block, on a site that marks its headings: still code
        text = ("# Doc [¶](#doc)\n\n## Readme [¶](#readme)\n\n```md\n# My project\n\nThis is a sample readme for "
                "the project.\n```\n\n## After [¶](#after)\n")
        assert heads(text) == [(1, 1, "Doc"), (3, 2, "Readme"), (11, 2, "After")]
        assert len(parse(text).pages) == 1
