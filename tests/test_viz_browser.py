"""The VIZ page in a real browser: headless Chromium (the system's, /usr/bin/chromium) driven by Playwright opens the
page of a small program (kernels and a copy), picks a kernel, sees its graph drawn and its source, steps through a
rewrite, and sees the schedule and the timeline."""
import os
import pathlib
import sys
import pytest
from tinycore import profiler, viz
from tinycore.caches import clear_caches

CHROMIUM = os.environ.get("TINYCORE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 30_000

# tox -e viz sets this: there a missing browser is a failure, not a skip
REQUIRED = os.environ.get("TINYCORE_VIZ_BROWSER_REQUIRED", "") not in ("", "0")


def missing(reason: str) -> None:
  if REQUIRED: raise RuntimeError(f"{reason}, and TINYCORE_VIZ_BROWSER_REQUIRED is set")
  pytest.skip(reason, allow_module_level=True)


if not pathlib.Path(CHROMIUM).exists():
  missing(f"no Chromium at {CHROMIUM} (install the system package, e.g. `apt-get install chromium`)")
try: from playwright import sync_api
except ImportError: missing("Playwright is not installed (`pip install playwright`; no `playwright install` needed)")

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import viz_program  # noqa: E402


@pytest.fixture(scope="module")
def server():
  """The VIZ server of one run of the small program, copying to SIM (PYTHON without tests/hcq_sim)."""
  was_profiling = profiler.is_enabled()
  clear_caches()
  viz.enable()
  try:
    assert viz_program.run(viz_program.copy_target()).tolist() == viz_program.expected().tolist()
  finally:
    viz.disable()
    if not was_profiling: profiler.disable()
  running = viz.serve(port=0, block=False)
  yield running
  running.stop()


@pytest.fixture(scope="module")
def browser():
  with sync_api.sync_playwright() as playwright:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    yield chromium
    chromium.close()


@pytest.fixture
def page(server, browser):
  """The page, loaded (its list and timeline filled in), with every console error collected in `page.errors`."""
  page = browser.new_page(viewport={"width": 1400, "height": 900})
  page.errors = []
  page.on("pageerror", lambda error: page.errors.append(str(error)))
  page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
  page.set_default_timeout(TIMEOUT_MS)
  page.goto(server.url)
  page.wait_for_selector("body[data-loaded]")
  assert page.get_attribute("body", "data-loaded") == "true", page.text_content("#summary")
  yield page
  page.close()


def test_the_list_shows_the_schedule_with_its_copy(page):
  items = page.locator("#realizes .item")
  assert items.count() == 4
  assert page.locator("#realizes .item.kernel").count() == 3
  copy = page.locator("#realizes .item.copy")
  assert copy.count() == 1 and copy.text_content().startswith(f"copy CPU -> {viz_program.copy_target()}")
  # the copy is drawn in the store colour
  assert copy.evaluate("e => getComputedStyle(e).borderLeftColor") == "rgb(239, 108, 0)"
  assert "1 schedules, 3 kernels" in page.text_content("#summary")
  assert page.errors == []


def test_a_kernel_shows_its_graph_source_and_steps(page):
  page.locator("#realizes .item.kernel").first.click()
  page.wait_for_selector("#graph g.node")
  title = page.text_content("#graph-title")
  assert title.startswith("kernel r_4_4_4")
  first_nodes = page.locator("#graph g.node").count()
  assert first_nodes > 5 and page.locator("#graph path.edge").count() >= first_nodes - 1
  assert "r_4_4_4" in page.text_content("#source")  # the rendered source names the kernel
  steps = page.locator("#steps li")
  assert steps.count() >= 3 and steps.nth(0).text_content() == "start"
  assert page.text_content("#step-name") == "step 0: start"
  # step forward: the rangeify pass turns the tensor graph into a kernel with loops, its new nodes marked
  page.click("#step-next")
  assert page.text_content("#step-name") == "step 1: rangeify"
  assert page.locator("#graph g.node[data-op=RANGE]").count() > 0
  assert page.locator("#graph g.node.new").count() > 0
  # the first rewrite pass names the rules that fired
  symbolic = next(i for i in range(steps.count()) if steps.nth(i).text_content().startswith("symbolic ("))
  steps.nth(symbolic).click()
  assert page.text_content("#rules").startswith("rules that fired: ")
  assert page.errors == []


def test_a_realize_draws_its_linear_of_calls(page):
  page.locator("#realizes .realize-title").first.click()
  page.wait_for_selector("#graph g.node[data-op=COPY]")
  assert page.locator("#graph g.node[data-op=CALL]").count() == 3
  assert page.locator("#graph g.node[data-op=BUFFER]").count() == 4
  assert page.locator("#graph g.node[data-op=COPY] rect").get_attribute("fill") == "#ffb74d"  # the STORE colour
  assert page.errors == []


def test_the_timeline_has_a_box_per_profiled_event(page, server):
  events = [e for e in profiler.trace()["traceEvents"] if e["ph"] == "X"]
  assert events, "the profiler recorded nothing while VIZ was on"
  boxes = page.locator("#timeline rect.box")
  assert boxes.count() == len(events)
  assert page.locator("#timeline text.track-label").count() == len({(e["pid"], e["tid"]) for e in events})
  assert "(" in page.locator("#timeline rect.box title").first.text_content()  # hover: name (duration) and args
  # the wheel zooms in time around the pointer; a double-click shows everything again
  whole = page.text_content("#timeline-note")
  area = page.locator("#timeline").bounding_box()
  page.mouse.move(area["x"] + area["width"] * 0.9, area["y"] + 5)
  page.mouse.wheel(0, -400)
  page.wait_for_function("whole => document.getElementById('timeline-note').textContent !== whole", arg=whole)
  assert boxes.count() <= len(events)
  page.dblclick("#timeline")
  assert page.text_content("#timeline-note") == whole and boxes.count() == len(events)
  assert page.errors == []
