"""Predictors that run outside the scheduling core (issue 15): urgency from what a request says (``urgency``, on
KTAS triage data), output-length buckets from its prompt (``length``), seed 000's noisy oracles (``oracle``) and
what predicting costs before a request can be scheduled (``cost``). The core sees only their results on a
:class:`~semsched.core.request.Request`: ``urgency``, ``predicted_output`` and ``ready_time_s``.

Seed 000's predictors:

* ``ktas``: KTAS triage files: ``load_ktas`` -> ``TriageRecords`` (the text a dispatch LLM would receive);
  ``TriageDataError`` names missing columns or the row and column of a bad value.
* ``urgency``: ``UrgencyClassifier``: complaint TF-IDF or all-MiniLM-L6-v2 embedding + vitals + coded fields,
  logistic regression, levels at an under-triage threshold; ``cross_validate``, ``cross_val_levels``
  (out-of-fold levels for ``ktas-ed:urgency=predicted``), ``measure_cost``; a model directory holds
  ``model.joblib`` + ``model.json``.
* ``embed``: ``Embedder``: the offline model of the ``[embed]`` extra, loaded once per process, embeddings
  cached on disk under ``$SEMSCHED_CACHE_DIR``.
* ``oracle``: the noisy oracle: ``mislabel``, a share ``e`` wrong at a mean distance ``e x levels``.
* ``length``: output-length buckets, the noisy bucket oracle, a trained bucket predictor on MT-Bench/AlpacaEval
  answers.
* ``cost``: ``PredictorCost``: when each request's prediction is ready, batches ``immediate`` or ``full``
  (numpy only).

Seed 002's online output-length *distribution* predictors:

* ``online``: the ``OnlineLengthPredictor`` protocol: ``predict(Prompts)``, ``observe`` of finished requests
  only.
* ``history``: ``FinishedHistory`` (FIFO numpy ring buffers, 10,000 rows by default) and the warm-up ``Corpus``
  read from answer files.
* ``knn`` (``semantic-knn``: cosine >= 0.8 over the history by one matrix product, then the warm-up corpus,
  then the top-k; ``input-length``), ``fitted`` (``histogram``; ``regressor``: ridge on log length, a point;
  ``buckets``: seed 000's classifier; refit every ``refit_every`` = 100 finished requests).
* ``length_registry``: ``@register_length_predictor``, ``make_length_predictor("name:key=value;...")``;
  ``noise``: ``UniformMix`` (seed 002 Fig. 11's noisy predictions); ``scoring``: exact CRPS, bucket log-loss,
  accuracy, MAE of the mean; ``lengths_eval``: ``online`` / ``cross-model`` evaluation with per-request cost,
  embedding timed apart (``semsched lengths eval``).
"""
