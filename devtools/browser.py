"""Debian's Chromium, headless, driven by Playwright, and the checks every page must pass in it.

Shared by the browser tests (`tests/support/browser.py`) and the demo walk (`scripts/demo_walk.py`),
so that both start the same browser and call a page too wide by the same rule."""

from __future__ import annotations

from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# The two widths every page is checked at (a laptop and a phone).
VIEWPORTS = {"wide": (1280, 800), "phone": (390, 844)}

# The page's width against the viewport's, and (when wider) the outermost elements that stick
# out: those whose parent still fits, so a wide table names itself rather than each of its cells.
_OVERFLOW_SCRIPT = """() => {
  const width = document.documentElement.scrollWidth;
  const viewport = window.innerWidth;
  if (width <= viewport) { return {width, viewport, elements: []}; }
  const describe = (element) => {
    let name = element.tagName.toLowerCase();
    if (element.id) { name += "#" + element.id; }
    else if (element.classList.length) { name += "." + [...element.classList].join("."); }
    return name;
  };
  // Inside a box that scrolls or clips (a card's table), nothing widens the page.
  const contained = (element) => {
    for (let box = element.parentElement; box && box !== document.body; box = box.parentElement) {
      if (getComputedStyle(box).overflowX !== "visible") { return true; }
    }
    return false;
  };
  const elements = [];
  for (const element of document.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    // Content spilling out of a box that does not scroll it (a <pre> of long lines) counts too.
    const spills = element.scrollWidth > element.clientWidth + 1
      && getComputedStyle(element).overflowX === "visible";
    const right = (spills ? box.left + element.scrollWidth : box.right) + window.scrollX;
    const parent = element.parentElement;
    const parentRight = parent ? parent.getBoundingClientRect().right + window.scrollX : 0;
    if (right > viewport + 0.5 && parentRight <= viewport + 0.5 && !contained(element)) {
      elements.push(describe(element) + " (" + Math.round(right) + " px)");
      if (elements.length >= 5) { break; }
    }
  }
  return {width, viewport, elements};
}"""


def viewport_overflow(page: Any) -> str:
    """ "" when nothing makes the page wider than the screen (wide tables scroll inside their card),
    else what is wider and by how much."""
    found = page.evaluate(_OVERFLOW_SCRIPT)
    if found["width"] <= found["viewport"]:
        return ""
    message = f"the page is {found['width']} px wide in a {found['viewport']} px viewport"
    if found["elements"]:
        message += " (sticking out: " + ", ".join(found["elements"]) + ")"
    return message
