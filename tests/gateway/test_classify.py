"""The gateway's classifier: waiting prompts are classified most important first, and their number is bounded."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from semsched.gateway.classify import Classifier, Prediction
from semsched.gateway.config import ClassifierConfig
from semsched.gateway.metrics import GatewayMetrics

KEYWORDS = {"urgency": "keywords", "keywords": {"pain": 0}}


class _HeldModels:
    """Stands in for the classifier's models: records each batch's prompts; the first batch waits for ``release``
    (so that the next prompts queue up behind it, whatever the machine's speed)."""

    def __init__(self, classifier: Classifier) -> None:
        self.batches: list[list[str]] = []
        self.release, self.entered = threading.Event(), threading.Event()
        self._predict = classifier._predict
        classifier._predict = self  # type: ignore[method-assign]

    def __call__(self, texts: list[str], observed: list[Any]) -> list[Prediction]:
        if not self.batches:
            self.entered.set()
            self.release.wait(30)
        self.batches.append(list(texts))
        result: list[Prediction] = self._predict(texts, observed)
        return result


async def _until(predicate: Any) -> None:
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 30 s")


def test_a_premium_prompt_is_classified_before_a_queued_background_burst() -> None:
    async def run() -> list[list[str]]:
        classifier = Classifier(ClassifierConfig(**KEYWORDS, max_batch=1, max_wait_ms=0, timeout_ms=60_000))
        models = _HeldModels(classifier)
        await classifier.start()
        try:
            background = [asyncio.create_task(classifier.classify(f"bg{i}", priority=3)) for i in range(6)]
            await _until(lambda: models.entered.is_set() and classifier.queued == 5)  # bg0 in the models, 5 wait
            premium = asyncio.create_task(classifier.classify("premium pain", priority=1))
            await _until(lambda: classifier.queued == 6)
            models.release.set()
            assert (await premium).urgency == 0
            await asyncio.gather(*background)
        finally:
            await classifier.stop()
        return models.batches

    batches = asyncio.run(run())
    order = [text for batch in batches for text in batch]
    assert order[0] == "bg0" and order[1] == "premium pain", order  # not behind bg1..bg5, who came first
    assert sorted(order[2:]) == [f"bg{i}" for i in range(1, 6)]


def test_the_waiting_prompts_are_bounded_and_the_least_important_goes_on_unclassified() -> None:
    metrics = GatewayMetrics()

    async def run() -> tuple[list[Prediction], Prediction, list[list[str]]]:
        classifier = Classifier(ClassifierConfig(**KEYWORDS, max_batch=1, max_wait_ms=0, max_queued=2,
                                                 timeout_ms=60_000), metrics)
        models = _HeldModels(classifier)
        await classifier.start()
        try:
            held = asyncio.create_task(classifier.classify("bg pain 0", priority=3))
            await _until(models.entered.is_set)  # bg0 is in the models
            waiting = [asyncio.create_task(classifier.classify(f"bg pain {i}", priority=3)) for i in (1, 2)]
            await _until(lambda: classifier.queued == 2)
            # full: a third BACKGROUND prompt goes on at once, unclassified
            overflow = await classifier.classify("bg pain 3", priority=3)
            # a PREMIUM prompt takes the place of the last BACKGROUND one, which goes on unclassified
            premium = asyncio.create_task(classifier.classify("premium pain", priority=1))
            bumped = await waiting[1]
            models.release.set()
            results = [await held, await waiting[0], bumped, await premium]
        finally:
            await classifier.stop()
        return results, overflow, models.batches

    (held, first, bumped, premium), overflow, batches = asyncio.run(run())
    assert overflow.urgency is None and bumped.urgency is None  # token count only
    assert held.urgency == first.urgency == premium.urgency == 0
    assert [text for batch in batches for text in batch] == ["bg pain 0", "premium pain", "bg pain 1"]
    assert metrics.classifier_timeouts._value.get() == 2
