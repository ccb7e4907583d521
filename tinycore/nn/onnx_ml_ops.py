"""The ai.onnx.ml operators: classic machine-learning models (linear models, support vector machines, tree
ensembles) and the preprocessing around them (scalers, normalizers, imputers, encoders), as converters such as
skl2onnx write scikit-learn models. Registered into `onnx_ops.OPS`.

A model's parameters arrive as attributes (lists of numbers) and become constant tensors on the input's device; a
batch runs as tensor math, with no Python loop over samples: a linear model is a matmul, an SVM a kernel matrix
against its support vectors, a tree ensemble every sample walking every tree at once. What ONNX defines on strings
or maps (string class labels and categories, ZipMap's sequence of maps, CastMap) is refused when the model loads:
tinycore has neither strings nor maps.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from tinycore.dtype import DType, dtypes
from tinycore.nn.onnx_ops import flatten_list, refuse, register
from tinycore.tensor import Tensor

ML = "ai.onnx.ml"
# Winitzki's closed-form approximation of erf's inverse: the one PROBIT uses in onnxruntime and onnx's reference
ERFINV_A = 0.147
# SOFTMAX_ZERO leaves scores this close to 0 at (about) 0 instead of exponentiating them
SOFTMAX_ZERO_EPSILON = 1e-7
# a norm below this divides as this (a row of zeros stays zeros)
SMALLEST_NORM = 1e-30
# the old tree ensembles' node modes as ai.onnx.ml 5's TreeEnsemble codes them
BRANCH_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
MEMBER_MODE = 6
# ai.onnx.ml 5's integer codes for aggregate_function and post_transform
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


# ---------------------------------------------------------------------------------------------------- refused forms
def _zipmap_reason(names: set[str]) -> str:
  return ("ZipMap outputs a sequence of maps (class label -> probability), which tinycore cannot represent: convert "
          "the classifier without it, skl2onnx.to_onnx(model, X, options={id(model): {\"zipmap\": False}}), and the "
          "probabilities come as one tensor with a column per class")


def _string_attribute_reason(*string_attributes: str) -> Callable[[set[str]], str | None]:
  def reason(names: set[str]) -> str | None:
    given = [name for name in string_attributes if name in names]
    if not given: return None
    return (f"attribute {given[0]!r} holds strings, and string tensors do not exist in tinycore: train or convert "
            "the model with integer class labels or categories (for example encode them with sklearn's "
            "LabelEncoder before fitting)")
  return reason


refuse("ZipMap", _zipmap_reason, domain=ML)
refuse("CastMap", lambda names: "CastMap reads a map, which tinycore cannot represent (it has no map values)",
       domain=ML)
for _name in ("LinearClassifier", "SVMClassifier"): refuse(_name, _string_attribute_reason("classlabels_strings"), ML)
refuse("TreeEnsembleClassifier", _string_attribute_reason("classlabels_strings"), domain=ML)
refuse("OneHotEncoder", _string_attribute_reason("cats_strings"), domain=ML)


# ---------------------------------------------------------------------------------------------------- helpers
def _features(x: Tensor) -> Tensor:
  """x as a (samples, features) float matrix: float64 stays, anything else computes in float32; a 1-d x is one row."""
  if x.dtype not in (dtypes.float32, dtypes.float64): x = x.cast(dtypes.float32)
  return x.reshape(1, -1) if x.ndim == 1 else x


def _constant(values: list, like: Tensor, dtype: DType | None = None) -> Tensor:
  """An attribute's numbers as a tensor beside `like` (in its dtype unless told)."""
  return Tensor(values, dtype=dtype or like.dtype, device=like.device)


def _attribute_list(value: Any, ctx: Any) -> list | None:
  """A tensor attribute's values as a flat list (its host value, or read from the device)."""
  if value is None: return None
  t, host = value
  return flatten_list(host if host is not None else ctx.value(t))


def _class_labels(classlabels: list[int] | None, classes: int, like: Tensor) -> Tensor:
  """The int64 label of each class index (the index itself when the model gives none)."""
  return _constant(list(classlabels) if classlabels else list(range(classes)), like, dtypes.int64)


def inverse_erf(x: Tensor) -> Tensor:
  """erf^-1(x) by Winitzki's approximation (relative error about 2e-3), as onnxruntime computes PROBIT."""
  log_term = ((1 - x) * (1 + x)).log()
  first = 2 / (math.pi * ERFINV_A) + 0.5 * log_term
  return x.sign() * ((first * first - log_term / ERFINV_A).sqrt() - first).sqrt()


def softmax_zero(scores: Tensor) -> Tensor:
  """Softmax over the last axis that keeps zero scores at zero: a score within SOFTMAX_ZERO_EPSILON of 0 is scaled by
  exp(-max) instead of exponentiated; a row whose terms sum to 0 becomes 0.5 everywhere."""
  top = scores.max(-1, keepdim=True)
  terms = (scores.abs() > SOFTMAX_ZERO_EPSILON).where((scores - top).exp(), scores * (-top).exp())
  total = terms.sum(-1, keepdim=True)
  return (total == 0).where(0.5, terms / total).cast(scores.dtype)


def apply_post_transform(scores: Tensor, name: str, ctx: Any) -> Tensor:
  """A model's scores after its post_transform (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT)."""
  if name == "NONE": return scores
  if name == "LOGISTIC": return scores.sigmoid()
  if name == "SOFTMAX": return scores.softmax(-1)
  if name == "SOFTMAX_ZERO": return softmax_zero(scores)
  if name == "PROBIT": return (math.sqrt(2) * inverse_erf(2 * scores - 1)).cast(scores.dtype)
  raise ctx.error(f"attribute 'post_transform' {name!r} is not one of {', '.join(POST_TRANSFORMS)}")


# ---------------------------------------------------------------------------------------------------- preprocessing
@register("Binarizer", domain=ML)
def binarizer(x, threshold=0.0): return (x > threshold).cast(x.dtype)


@register("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(x, indices):
  """x's last axis picked at indices (a 1-d x is one row)."""
  picked = x[..., indices.reshape(-1).cast(dtypes.int64)]
  return picked.reshape(1, -1) if x.ndim == 1 else picked


@register("Scaler", domain=ML)
def scaler(x, offset=None, scale=None):
  """(x - offset) * scale, each one value or one per feature, in float."""
  x = x if dtypes.is_float(x.dtype) else x.cast(dtypes.float32)
  shifted = x - _constant(offset, x) if offset else x
  return shifted * _constant(scale, x) if scale else shifted


@register("Normalizer", domain=ML)
def normalizer(x, norm="MAX", ctx=None):
  """Each row divided by its largest magnitude (MAX), its sum of magnitudes (L1) or its Euclidean length (L2), as
  sklearn's Normalizer and onnx's reference implementation do (onnxruntime's MAX divides by the largest value)."""
  x = _features(x)
  if norm == "MAX": length = x.abs().max(1, keepdim=True)
  elif norm == "L1": length = x.abs().sum(1, keepdim=True)
  elif norm == "L2": length = (x * x).sum(1, keepdim=True).sqrt()
  else: raise ctx.error(f"attribute 'norm' {norm!r} is not MAX, L1 or L2")
  return x / length.maximum(SMALLEST_NORM)


@register("Imputer", domain=ML)
def imputer(x, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0, replaced_value_int64=0,
            ctx=None):
  """x with its missing entries (equal to the replaced value; NaN when that is NaN) replaced by the imputed value of
  their feature (or the one imputed value for all)."""
  floats = dtypes.is_float(x.dtype)
  values, replaced = ((imputed_value_floats, replaced_value_float) if floats else
                      (imputed_value_int64s, replaced_value_int64))
  if not values:
    raise ctx.error(f"no imputed values for a {x.dtype.name} input (imputed_value_{'floats' if floats else 'int64s'})")
  missing = x.isnan() if floats and math.isnan(replaced) else x == replaced
  return missing.where(_constant(values, x), x)


@register("OneHotEncoder", domain=ML)
def one_hot_encoder(x, cats_int64s=None, zeros=1, ctx=None):
  """A float one-hot row per value over the int64 categories: (..., categories). A value in no category gives a row
  of zeros, whatever `zeros` says (with zeros=0 onnxruntime raises instead: checking would read the input back)."""
  if not cats_int64s: raise ctx.error("OneHotEncoder without cats_int64s: no categories")
  categories = _constant(cats_int64s, x, dtypes.int64)
  return (x.cast(dtypes.int64).unsqueeze(-1) == categories).cast(dtypes.float32)


@register("FeatureVectorizer", domain=ML)
def feature_vectorizer(*xs, inputdimensions=None, ctx=None):
  """The inputs side by side as float columns, each cut or zero-padded to its width in inputdimensions."""
  if inputdimensions is None or len(inputdimensions) != len(xs):
    raise ctx.error(f"inputdimensions {inputdimensions} does not give one width per input ({len(xs)})")
  columns = []
  for x, width in zip(xs, inputdimensions):
    x = x.cast(dtypes.float32)
    x = x.reshape(-1, 1) if x.ndim == 1 else x
    if x.shape[1] > width: x = x[:, :width]
    elif x.shape[1] < width: x = x.cat(Tensor.zeros(x.shape[0], width - x.shape[1], device=x.device), dim=1)
    columns.append(x)
  return columns[0].cat(*columns[1:], dim=1) if len(columns) > 1 else columns[0]


# ---------------------------------------------------------------------------------------------------- linear models
def _linear_scores(x: Tensor, coefficients: list[float], intercepts: list[float] | None, rows: int) -> Tensor:
  """x @ coefficients^T + intercepts, the coefficients a (rows, features) matrix given row by row."""
  scores = x @ _constant(coefficients, x).reshape(rows, -1).T
  return scores + _constant(intercepts, x) if intercepts else scores


@register("LinearRegressor", domain=ML)
def linear_regressor(x, coefficients=None, intercepts=None, targets=1, post_transform="NONE", ctx=None):
  x = _features(x)
  return apply_post_transform(_linear_scores(x, coefficients, intercepts, targets), post_transform, ctx)


@register("LinearClassifier", domain=ML)
def linear_classifier(x, coefficients=None, intercepts=None, classlabels_ints=None, multi_class=0,
                      post_transform="NONE", ctx=None):
  """Class scores x @ coefficients^T + intercepts (after post_transform) and the label of the best. A binary model
  has one coefficient row scoring the second class: its scores are (-s, s) before the transform. multi_class (one
  versus rest or not) changes nothing here: the converter chose the transform."""
  x = _features(x)
  classes = len(classlabels_ints or [])
  rows = len(coefficients) // x.shape[1]
  scores = _linear_scores(x, coefficients, intercepts, rows)
  if rows == 1 and classes == 2: scores = (-scores).cat(scores, dim=1)
  scores = apply_post_transform(scores, post_transform, ctx)
  if scores.shape[1] > 1: return _class_labels(classlabels_ints, scores.shape[1], x)[scores.argmax(1)], scores
  # one score and not two classes: a yes/no model whose "yes" is the first label
  threshold = 0.0 if post_transform == "NONE" else 0.5
  yes = classlabels_ints[0] if classlabels_ints else 1
  return (scores[:, 0] >= threshold).where(yes, 0).cast(dtypes.int64), scores


# ---------------------------------------------------------------------------------------------------- support vectors
@attrs.frozen
class Kernel:
  """An SVM's kernel: its type (LINEAR, POLY, RBF, SIGMOID) and kernel_params (gamma, coef0, degree)."""
  kind: str
  gamma: float = 0.0
  coef0: float = 0.0
  degree: int = 0

  @staticmethod
  def of(kernel_type: str, kernel_params: list[float] | None, ctx: Any) -> Kernel:
    if kernel_type not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
      raise ctx.error(f"attribute 'kernel_type' {kernel_type!r} is not LINEAR, POLY, RBF or SIGMOID")
    gamma, coef0, degree = (list(kernel_params) + [0.0, 0.0, 0.0])[:3] if kernel_params else (0.0, 0.0, 0.0)
    return Kernel(kernel_type, float(gamma), float(coef0), int(degree))

  def __call__(self, x: Tensor, vectors: Tensor) -> Tensor:
    """The kernel between each row of x and each vector: (samples, vectors)."""
    if self.kind == "RBF":
      squared = ((x.unsqueeze(1) - vectors.unsqueeze(0)) ** 2).sum(-1)  # exact, not |x|^2 - 2 x.v + |v|^2
      return (-self.gamma * squared).exp()
    dot = x @ vectors.T
    if self.kind == "LINEAR": return dot
    if self.kind == "SIGMOID": return (self.gamma * dot + self.coef0).tanh()
    base, power = self.gamma * dot + self.coef0, None
    for _ in range(self.degree): power = base if power is None else power * base  # an integer power of any sign
    return power if power is not None else base.full_like(1.0)


@register("SVMRegressor", domain=ML)
def svm_regressor(x, coefficients=None, kernel_params=None, kernel_type="LINEAR", n_supports=0, one_class=0,
                  post_transform="NONE", rho=None, support_vectors=None, ctx=None):
  """sum_j coefficient_j K(x, support_j) + rho (x . coefficients + rho without support vectors); a one-class model
  gives +1 inside, -1 outside."""
  x = _features(x)
  offset = rho[0] if rho else 0.0
  if n_supports > 0:
    vectors = _constant(support_vectors, x).reshape(n_supports, -1)
    scores = Kernel.of(kernel_type, kernel_params, ctx)(x, vectors) @ _constant(coefficients, x).reshape(-1, 1)
  else: scores = x @ _constant(coefficients, x).reshape(-1, 1)
  scores = scores + offset
  if one_class: scores = (scores > 0).where(1.0, -1.0).cast(x.dtype)
  return apply_post_transform(scores, post_transform, ctx)


def _pairwise_weights(coefficients: list[float], vectors_per_class: list[int]) -> list[list[float]]:
  """libsvm's one-versus-one layout as one (vectors, pairs) matrix: the decision of pair (i, j), i < j, weighs class
  i's support vectors by coefficient row j - 1 and class j's by row i."""
  total, classes = sum(vectors_per_class), len(vectors_per_class)
  rows = [coefficients[r * total:(r + 1) * total] for r in range(classes - 1)]
  starts = [sum(vectors_per_class[:c]) for c in range(classes)]
  pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
  weights = [[0.0] * len(pairs) for _ in range(total)]
  for p, (i, j) in enumerate(pairs):
    for v in range(starts[i], starts[i] + vectors_per_class[i]): weights[v][p] = rows[j - 1][v]
    for v in range(starts[j], starts[j] + vectors_per_class[j]): weights[v][p] = rows[i][v]
  return weights


def _pair_matrices(classes: int, like: Tensor) -> tuple[Tensor, Tensor]:
  """(pairs, classes) one-hot matrices of each pair's first class i and second class j (pairs i < j, libsvm order)."""
  pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
  first = [[1.0 if c == i else 0.0 for c in range(classes)] for i, _ in pairs]
  second = [[1.0 if c == j else 0.0 for c in range(classes)] for _, j in pairs]
  return _constant(first, like), _constant(second, like)


@register("SVMClassifier", domain=ML)
def svm_classifier(x, coefficients=None, classlabels_ints=None, kernel_params=None, kernel_type="LINEAR",
                   post_transform="NONE", prob_a=None, prob_b=None, rho=None, support_vectors=None,
                   vectors_per_class=None, ctx=None):
  """With support vectors: libsvm's one-versus-one decisions (one per pair of classes), the label the class with
  the most votes, the scores the decisions (a binary model's one decision d as (-d, d)) or, with prob_a/prob_b,
  Platt-scaled pairwise probabilities coupled into one per class. Without: one linear score per class."""
  x = _features(x)
  classes = max(len(classlabels_ints or []), 1)
  labels = _class_labels(classlabels_ints, classes, x)
  kernel = Kernel.of(kernel_type, kernel_params, ctx)
  if not vectors_per_class or sum(vectors_per_class) == 0:
    scores = x @ _constant(coefficients, x).reshape(classes, -1).T + (rho[0] if rho else 0.0)
    return labels[scores.argmax(1)], apply_post_transform(scores, post_transform, ctx)
  vectors = _constant(support_vectors, x).reshape(sum(vectors_per_class), -1)
  decisions = kernel(x, vectors) @ _constant(_pairwise_weights(coefficients, vectors_per_class), x) + _constant(rho, x)
  first, second = _pair_matrices(classes, x)
  votes = (decisions > 0).cast(x.dtype) @ first + (decisions <= 0).cast(x.dtype) @ second
  label = labels[votes.argmax(1)]
  if prob_a: return label, _coupled_probabilities(decisions, prob_a, prob_b, classes, ctx)
  if decisions.shape[1] == 1 and post_transform != "PROBIT": decisions = (-decisions).cat(decisions, dim=1)
  return label, apply_post_transform(decisions, post_transform, ctx)


# libsvm's pairwise coupling: probabilities clipped this far from 0 and 1, iterations (at least), stopping tolerance
PAIR_PROBABILITY_CLIP = 1e-7
COUPLING_MIN_ITERATIONS = 100
COUPLING_TOLERANCE = 0.005


def _coupled_probabilities(decisions: Tensor, prob_a: list[float], prob_b: list[float], classes: int,
                           ctx: Any) -> Tensor:
  """Per class probabilities from the pairwise decisions, as libsvm (and so sklearn's SVC) computes them: each pair's
  Platt probability r_ij = 1 - sigmoid(A d + B) (clipped), then the p that minimizes sum (r_ji p_i - r_ij p_j)^2,
  by libsvm's coordinate updates. Each sample stops where libsvm would (its error under tolerance / classes); the
  batch runs until every sample has stopped, reading one flag per iteration."""
  dtype = decisions.dtype
  platt = 1 - (decisions * _constant(prob_a, decisions) + _constant(prob_b, decisions)).sigmoid()
  platt = platt.clip(PAIR_PROBABILITY_CLIP, 1 - PAIR_PROBABILITY_CLIP)
  first, second = _pair_matrices(classes, decisions)
  # r[:, i, j] = probability that i beats j: platt on (i, j) pairs, 1 - platt on (j, i)
  wins = ((platt.unsqueeze(-1) * first.unsqueeze(0)).unsqueeze(-1) * second.unsqueeze(0).unsqueeze(-2)).sum(1)
  losses = (((1 - platt).unsqueeze(-1) * second.unsqueeze(0)).unsqueeze(-1) * first.unsqueeze(0).unsqueeze(-2)).sum(1)
  r = wins + losses  # (samples, classes, classes), zero diagonal
  off_diagonal = -(r.transpose(1, 2) * r)  # Q[t, j] = -r[j, t] r[t, j]
  eye = Tensor.eye(classes, dtype=dtype, device=decisions.device)
  q = off_diagonal * (1 - eye) + eye * (r * r).sum(1).unsqueeze(-1)  # Q[t, t] = sum_j r[j, t]^2
  p = Tensor.full((decisions.shape[0], classes), 1.0 / classes, dtype=dtype, device=decisions.device)
  done = Tensor.zeros(decisions.shape[0], 1, dtype=dtypes.bool, device=decisions.device)
  q_diagonal = (q * eye).sum(-1)
  for _ in range(max(COUPLING_MIN_ITERATIONS, classes)):
    qp = (q @ p.unsqueeze(-1)).squeeze(-1)
    pqp = (p * qp).sum(-1, keepdim=True)
    done = done | ((qp - pqp).abs().max(-1, keepdim=True) < COUPLING_TOLERANCE / classes)
    p, done = p.realize(), done.realize()
    if all(flatten_list(ctx.value(done))): break
    for t in range(classes):
      diff = (pqp[:, 0] - qp[:, t]) / q_diagonal[:, t]
      step = done[:, 0].where(0.0, diff).cast(dtype).unsqueeze(-1)
      column = eye[t].unsqueeze(0)
      p = (p + step * column) / (1 + step)
      pqp = (pqp + step * (step * q_diagonal[:, t:t + 1] + 2 * qp[:, t:t + 1])) / ((1 + step) * (1 + step))
      qp = (qp + step * q[:, t, :]) / (1 + step)
  return p


# ---------------------------------------------------------------------------------------------------- tree ensembles
@attrs.frozen
class TreeNodes:
  """A tree ensemble's interior nodes in ai.onnx.ml 5's layout, one entry per node: the feature it reads, its split
  value, its comparison (MODES' codes: 0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 member of a set), whether a missing (NaN)
  value goes the true way, and each branch's target: a node index, or a leaf index where its *_leafs flag is set.
  A tree whose root is a leaf starts at a node whose both branches are that leaf."""
  features: list[int]
  splits: list[float]
  modes: list[int]
  true_ids: list[int]
  false_ids: list[int]
  true_leafs: list[int]
  false_leafs: list[int]
  missing_tracks_true: list[int]
  member_sets: list[list[float]]  # the values of each MEMBER node (empty for other modes)
  roots: list[int]


def _tree_depth(nodes: TreeNodes) -> int:
  """The most decisions from a root to a leaf (host arithmetic on the tree's attributes)."""
  depth, frontier = 0, list(nodes.roots)
  while frontier:
    depth += 1
    frontier = [child for node in frontier for child, leaf in ((nodes.true_ids[node], nodes.true_leafs[node]),
                                                                (nodes.false_ids[node], nodes.false_leafs[node]))
                if not leaf]
    if depth > len(nodes.true_ids) + 1: raise ValueError("the tree ensemble's nodes form a cycle")
  return depth


def walk_trees(x: Tensor, nodes: TreeNodes) -> Tensor:
  """The leaf each sample reaches in each tree: (samples, trees) leaf indices. Every sample walks every tree at
  once, one decision per step (gathers from the node tables), for as many steps as the deepest tree."""
  dev, dtype = x.device, x.dtype
  def table(values: list, kind: DType) -> Tensor: return Tensor(values, dtype=kind, device=dev)
  widest = max((len(m) for m in nodes.member_sets), default=1) or 1
  member_rows = [m + [math.nan] * (widest - len(m)) for m in nodes.member_sets]
  feature, split = table(nodes.features, dtypes.int64), table(nodes.splits, dtype)
  mode_t, track_t = table(nodes.modes, dtypes.int64), table(nodes.missing_tracks_true, dtypes.bool)
  true_id, false_id = table(nodes.true_ids, dtypes.int64), table(nodes.false_ids, dtypes.int64)
  true_leaf, false_leaf = table(nodes.true_leafs, dtypes.bool), table(nodes.false_leafs, dtypes.bool)
  member_t = table(member_rows, dtype)
  n, trees = x.shape[0], len(nodes.roots)
  node = table(nodes.roots, dtypes.int64).reshape(1, trees).expand(n, trees)
  root_leaves = [bool(nodes.true_leafs[r] and nodes.false_leafs[r] and nodes.true_ids[r] == nodes.false_ids[r])
                 for r in nodes.roots]
  is_leaf = table(root_leaves, dtypes.bool).reshape(1, trees).expand(n, trees)
  if any(root_leaves): node = is_leaf.where(true_id[node], node)
  for _ in range(_tree_depth(nodes)):
    value = x.gather(1, feature[node])
    s, m = split[node], mode_t[node]
    decided = [value <= s, value < s, value >= s, value > s, value == s, value != s,
               (value.unsqueeze(-1) == member_t[node]).any(-1)]
    go_true = decided[MEMBER_MODE]
    for code in range(MEMBER_MODE - 1, -1, -1): go_true = (m == code).where(decided[code], go_true)
    go_true = go_true | (value.isnan() & track_t[node])
    next_node = go_true.where(true_id[node], false_id[node])
    next_leaf = go_true.where(true_leaf[node], false_leaf[node])
    node, is_leaf = is_leaf.where(node, next_node), is_leaf | next_leaf
  return node


@attrs.frozen
class LeafValues:
  """What each leaf adds to each target: weights[leaf][target], and present[leaf][target] where the leaf names the
  target at all (MIN and MAX skip the others)."""
  weights: list[list[float]]
  present: list[list[bool]]


def aggregate_leaves(leaves: Tensor, values: LeafValues, function: str, dtype: DType) -> Tensor:
  """The reached leaves' values per target, (samples, targets), combined over the trees by SUM, AVERAGE, MIN or
  MAX (a target no reached leaf names: 0 for SUM and AVERAGE, +inf for MIN, -inf for MAX)."""
  weights = Tensor(values.weights, dtype=dtype, device=leaves.device)[leaves]  # (samples, trees, targets)
  if function in ("SUM", "AVERAGE"):
    total = weights.sum(1)
    return (total / leaves.shape[1] if function == "AVERAGE" else total).cast(dtype)
  present = Tensor(values.present, dtype=dtypes.bool, device=leaves.device)[leaves]
  if function == "MIN": return present.where(weights, math.inf).min(1).cast(dtype)
  return present.where(weights, -math.inf).max(1).cast(dtype)


def _member_sets(modes: list[int], membership_values: list[float]) -> list[list[float]]:
  """Each node's member set: MEMBER nodes take the NaN-separated sets of membership_values in order."""
  sets, current = [], []
  for v in membership_values:
    if math.isnan(v): sets.append(current); current = []
    else: current.append(v)
  found = iter(sets)
  return [next(found) if mode == MEMBER_MODE else [] for mode in modes]


@register("TreeEnsemble", domain=ML)
def tree_ensemble(x, nodes_splits, nodes_featureids, nodes_modes, nodes_truenodeids, nodes_falsenodeids,
                  nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, aggregate_function=1,
                  post_transform=0, n_targets=None, nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                  membership_values=None, ctx=None):
  """ai.onnx.ml 5's tree ensemble: per target, the reached leaves' weights aggregated over the trees, then the
  post transform."""
  modes = [int(m) for m in _attribute_list(nodes_modes, ctx)]
  nodes = TreeNodes(list(nodes_featureids), _attribute_list(nodes_splits, ctx), modes, list(nodes_truenodeids),
                    list(nodes_falsenodeids), list(nodes_trueleafs), list(nodes_falseleafs),
                    list(nodes_missing_value_tracks_true or [0] * len(modes)),
                    _member_sets(modes, _attribute_list(membership_values, ctx) or []), list(tree_roots))
  targets = n_targets or (max(leaf_targetids) + 1)
  weights = _attribute_list(leaf_weights, ctx)
  rows = [[weights[leaf] if leaf_targetids[leaf] == t else 0.0 for t in range(targets)] for leaf in range(len(weights))]
  present = [[leaf_targetids[leaf] == t for t in range(targets)] for leaf in range(len(weights))]
  scores = aggregate_leaves(walk_trees(x, nodes), LeafValues(rows, present), AGGREGATES[aggregate_function], x.dtype)
  return post_transform_by_code(scores, post_transform, ctx)


def post_transform_by_code(scores: Tensor, code: int, ctx: Any) -> Tensor:
  """ai.onnx.ml 5's post_transform, given by its integer code."""
  if not 0 <= code < len(POST_TRANSFORMS): raise ctx.error(f"attribute 'post_transform' {code} is not 0 to 4")
  return apply_post_transform(scores, POST_TRANSFORMS[code], ctx)


@attrs.frozen
class TreeTargets:
  """The old tree ensembles' leaf entries: entry k adds weights[k] to target ids[k] at leaf (tree_ids[k],
  node_ids[k]); a leaf may have several."""
  tree_ids: list[int]
  node_ids: list[int]
  ids: list[int]
  weights: list[float]


@attrs.frozen
class OldFormNodes:
  """ai.onnx.ml 1-3's tree nodes, leaves included, each named by (tree id, node id): its feature, split value and
  mode (BRANCH_LEQ, ..., or LEAF), the node ids its branches go to, and where a missing value goes."""
  tree_ids: list[int]
  node_ids: list[int]
  modes: list[str]
  features: list[int]
  values: list[float]
  true_ids: list[int]
  false_ids: list[int]
  missing_tracks_true: list[int]


def _old_form_nodes(ctx: Any, nodes_treeids: list[int], nodes_nodeids: list[int], nodes_modes: list[str],
                    nodes_featureids: list[int], nodes_values: list[float] | None, nodes_values_as_tensor: Any,
                    nodes_truenodeids: list[int], nodes_falsenodeids: list[int],
                    nodes_missing_value_tracks_true: list[int] | None) -> OldFormNodes:
  """The nodes_* attributes as one record (split values from the float or the double form)."""
  values = _attribute_list(nodes_values_as_tensor, ctx) or nodes_values or [0.0] * len(nodes_modes)
  unknown = sorted({m for m in nodes_modes if m != "LEAF" and m not in BRANCH_MODES})
  if unknown: raise ctx.error(f"attribute 'nodes_modes' has {unknown[0]!r}, not LEAF or one of {list(BRANCH_MODES)}")
  return OldFormNodes(list(nodes_treeids), list(nodes_nodeids), list(nodes_modes), list(nodes_featureids), values,
                      list(nodes_truenodeids), list(nodes_falsenodeids),
                      list(nodes_missing_value_tracks_true or [0] * len(nodes_modes)))


def _one_leaf_root(leaf: int) -> dict[str, Any]:
  """The node a one-leaf tree starts at in ai.onnx.ml 5's layout: both branches go to the leaf."""
  return {"features": 0, "splits": 0.0, "modes": 0, "true_ids": leaf, "true_leafs": 1, "false_ids": leaf,
          "false_leafs": 1, "missing_tracks_true": 0}


def _old_form_tables(old: OldFormNodes, targets: TreeTargets, target_count: int) -> tuple[TreeNodes, LeafValues]:
  """ai.onnx.ml 1-3's nodes in ai.onnx.ml 5's layout: the interior nodes and the leaves numbered apart, branches by
  those numbers, each tree's root its first node (trees in the order of their ids); and each leaf's target values."""
  position = {(t, n): i for i, (t, n) in enumerate(zip(old.tree_ids, old.node_ids))}
  leaf_of = {i: k for k, i in enumerate(i for i, m in enumerate(old.modes) if m == "LEAF")}
  interior = [i for i, m in enumerate(old.modes) if m != "LEAF"]
  node_of = {i: k for k, i in enumerate(interior)}
  def branch(i: int, child_id: int) -> tuple[int, int]:
    child = position[(old.tree_ids[i], child_id)]
    return (leaf_of[child], 1) if child in leaf_of else (node_of[child], 0)
  true_branches = [branch(i, old.true_ids[i]) for i in interior]
  false_branches = [branch(i, old.false_ids[i]) for i in interior]
  columns: dict[str, list] = {
      "features": [old.features[i] for i in interior], "splits": [old.values[i] for i in interior],
      "modes": [BRANCH_MODES[old.modes[i]] for i in interior],
      "true_ids": [b[0] for b in true_branches], "true_leafs": [b[1] for b in true_branches],
      "false_ids": [b[0] for b in false_branches], "false_leafs": [b[1] for b in false_branches],
      "missing_tracks_true": [old.missing_tracks_true[i] for i in interior]}
  first_node: dict[int, int] = {}
  for i, t in enumerate(old.tree_ids): first_node.setdefault(t, i)
  roots = []
  for t in sorted(first_node):
    root = first_node[t]
    if root in node_of: roots.append(node_of[root]); continue
    roots.append(len(columns["features"]))
    for name, value in _one_leaf_root(leaf_of[root]).items(): columns[name].append(value)
  nodes = TreeNodes(member_sets=[[] for _ in columns["features"]], roots=roots, **columns)
  weights = [[0.0] * target_count for _ in leaf_of]
  present = [[False] * target_count for _ in leaf_of]
  for tree, node, target, weight in zip(targets.tree_ids, targets.node_ids, targets.ids, targets.weights):
    leaf = leaf_of[position[(tree, node)]]
    weights[leaf][target] += weight
    present[leaf][target] = True
  return nodes, LeafValues(weights, present)


@register("TreeEnsembleRegressor", domain=ML)
def tree_ensemble_regressor(x, n_targets=None, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                            post_transform="NONE", target_ids=None, target_nodeids=None, target_treeids=None,
                            target_weights=None, target_weights_as_tensor=None, nodes_hitrates=None,
                            nodes_hitrates_as_tensor=None, nodes_treeids=None, nodes_nodeids=None, nodes_modes=None,
                            nodes_featureids=None, nodes_values=None, nodes_values_as_tensor=None,
                            nodes_truenodeids=None, nodes_falsenodeids=None, nodes_missing_value_tracks_true=None,
                            ctx=None):
  """ai.onnx.ml 1-3's tree ensemble regressor: per target, the reached leaves' weights aggregated over the trees
  (SUM, AVERAGE, MIN, MAX), plus base_values, then the post transform."""
  x = _features(x)
  if aggregate_function not in AGGREGATES:
    raise ctx.error(f"attribute 'aggregate_function' {aggregate_function!r} is not one of {', '.join(AGGREGATES)}")
  weights = _attribute_list(target_weights_as_tensor, ctx) or target_weights
  targets = TreeTargets(target_treeids, target_nodeids, target_ids, weights)
  count = n_targets or (max(target_ids) + 1)
  old = _old_form_nodes(ctx, nodes_treeids, nodes_nodeids, nodes_modes, nodes_featureids, nodes_values,
                        nodes_values_as_tensor, nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true)
  nodes, leaf_values = _old_form_tables(old, targets, count)
  scores = aggregate_leaves(walk_trees(x, nodes), leaf_values, aggregate_function, x.dtype)
  base = _attribute_list(base_values_as_tensor, ctx) or base_values
  if base: scores = scores + _constant(base, scores)
  return apply_post_transform(scores, post_transform, ctx)


@register("TreeEnsembleClassifier", domain=ML)
def tree_ensemble_classifier(x, classlabels_int64s=None, class_ids=None, class_nodeids=None, class_treeids=None,
                             class_weights=None, class_weights_as_tensor=None, base_values=None,
                             base_values_as_tensor=None, post_transform="NONE", nodes_hitrates=None,
                             nodes_hitrates_as_tensor=None, nodes_treeids=None, nodes_nodeids=None, nodes_modes=None,
                            nodes_featureids=None, nodes_values=None, nodes_values_as_tensor=None,
                            nodes_truenodeids=None, nodes_falsenodeids=None, nodes_missing_value_tracks_true=None,
                            ctx=None):
  """ai.onnx.ml 1-3's tree ensemble classifier: per class, base_values plus the reached leaves' weights summed over
  the trees, then the post transform; the label is the best class's. A binary model whose leaves score one class
  (the second's) scores the first as 1 - s (no transform, PROBIT) or -s (before LOGISTIC, SOFTMAX...)."""
  x = _features(x)
  classes = len(classlabels_int64s or [])
  weights = _attribute_list(class_weights_as_tensor, ctx) or class_weights
  targets = TreeTargets(class_treeids, class_nodeids, class_ids, weights)
  count = max(classes, max(class_ids) + 1)
  old = _old_form_nodes(ctx, nodes_treeids, nodes_nodeids, nodes_modes, nodes_featureids, nodes_values,
                        nodes_values_as_tensor, nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true)
  nodes, leaf_values = _old_form_tables(old, targets, count)
  scores = aggregate_leaves(walk_trees(x, nodes), leaf_values, "SUM", x.dtype)
  base = _attribute_list(base_values_as_tensor, ctx) or base_values
  if base: scores = scores + _constant(base, scores)[:count]
  if len(set(class_ids)) == 1 and classes <= 2:
    second = scores[:, :1]
    first = 1 - second if post_transform in ("NONE", "PROBIT") else -second
    scores = first.cat(second, dim=1)
  scores = apply_post_transform(scores, post_transform, ctx)
  return _class_labels(classlabels_int64s, scores.shape[1], x)[scores.argmax(1)], scores
