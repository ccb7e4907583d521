"""scikit-learn models trained in the test on small generated data, converted by skl2onnx (the ai.onnx.ml domain),
run by OnnxRunner and compared with sklearn's own predictions and with onnxruntime; what cannot run (ZipMap's maps,
string class labels) is refused with an error that says what to do; the post transforms and FeatureVectorizer on
hand-built nodes against onnxruntime.

Tolerances: the converted models compute in float32 where sklearn computes in float64 (from the same float32
inputs), so values agree to float32's rounding of sums: about 1e-5 of the largest magnitude (RTOL_SKLEARN).
onnxruntime computes in float32 too, in another order: the same bound (RTOL_ORT). Labels are exact."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tinycore.nn.onnx import OnnxError, OnnxRunner

ort = pytest.importorskip("onnxruntime")
skl2onnx = pytest.importorskip("skl2onnx")
pytest.importorskip("sklearn")
from sklearn import ensemble, impute, linear_model, pipeline, preprocessing, svm, tree
from sklearn.datasets import load_iris, make_classification, make_regression

RTOL_SKLEARN = 1e-5
RTOL_ORT = 1e-5


def classification(classes: int) -> tuple[np.ndarray, np.ndarray]:
  x, y = make_classification(n_samples=80, n_features=6, n_informative=4, n_redundant=1, n_classes=classes,
                             random_state=0)
  return x.astype(np.float32), y


def regression() -> tuple[np.ndarray, np.ndarray]:
  x, y = make_regression(n_samples=80, n_features=6, noise=0.5, random_state=0)
  return x.astype(np.float32), y


def convert(model, x: np.ndarray, zipmap_of=None) -> bytes:
  """The fitted model as ONNX bytes; `zipmap_of` is the classifier (the model, or a pipeline's last step) whose
  probabilities should come as a tensor instead of ZipMap's maps."""
  options = {id(zipmap_of): {"zipmap": False}} if zipmap_of is not None else None
  return skl2onnx.to_onnx(model, x[:1], options=options).SerializeToString()


def run_both(data: bytes, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """(tinycore's outputs, onnxruntime's outputs) on x."""
  session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
  name = session.get_inputs()[0].name
  ours = [t.numpy() for t in OnnxRunner(data)({name: x}).values()]
  return ours, session.run(None, {name: x})


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> float:
  """got == want to rtol of want's largest magnitude; returns the largest difference."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64).reshape(got.shape)
  scale = max(float(np.abs(want).max()), 1.0)
  difference = float(np.abs(got - want).max())
  assert difference <= rtol * scale, f"{what}: max |difference| {difference} > {rtol} * {scale}"
  return difference


def check_values(data: bytes, x: np.ndarray, sklearn_values: np.ndarray, with_onnxruntime: bool = True) -> None:
  ours, theirs = run_both(data, x)
  assert_close(ours[0], sklearn_values, RTOL_SKLEARN, "vs sklearn")
  if with_onnxruntime: assert_close(ours[0], theirs[0], RTOL_ORT, "vs onnxruntime")


def check_classifier(data: bytes, x: np.ndarray, labels: np.ndarray, scores: np.ndarray) -> None:
  """Labels equal sklearn's predict and onnxruntime's; scores (probabilities or decisions) close to both."""
  ours, theirs = run_both(data, x)
  assert ours[0].dtype == np.int64
  np.testing.assert_array_equal(ours[0], labels)
  np.testing.assert_array_equal(ours[0], theirs[0])
  assert_close(ours[1], scores, RTOL_SKLEARN, "scores vs sklearn")
  assert_close(ours[1], theirs[1], RTOL_ORT, "scores vs onnxruntime")


# ---------------------------------------------------------------------------------------------------- regressors
@pytest.mark.parametrize("model", [linear_model.LinearRegression(), linear_model.Ridge(alpha=0.5),
                                   tree.DecisionTreeRegressor(max_depth=4, random_state=0),
                                   ensemble.RandomForestRegressor(n_estimators=4, max_depth=3, random_state=0),
                                   ensemble.GradientBoostingRegressor(n_estimators=5, max_depth=2, random_state=0),
                                   svm.SVR(kernel="rbf", C=10.0), svm.SVR(kernel="linear"),
                                   svm.SVR(kernel="poly", degree=3, coef0=1.0)],
                         ids=["LinearRegression", "Ridge", "DecisionTreeRegressor", "RandomForestRegressor",
                              "GradientBoostingRegressor", "SVR-rbf", "SVR-linear", "SVR-poly"])
def test_regressor(model):
  x, y = regression()
  model.fit(x, y)
  check_values(convert(model, x), x, model.predict(x))


# ---------------------------------------------------------------------------------------------------- classifiers
@pytest.mark.parametrize("classes", [2, 3])
def test_logistic_regression(classes):
  x, y = classification(classes)
  model = linear_model.LogisticRegression(max_iter=500).fit(x, y)
  check_classifier(convert(model, x, zipmap_of=model), x, model.predict(x), model.predict_proba(x))


def test_standard_scaler_then_logistic_regression():
  x, y = load_iris(return_X_y=True)
  x = x.astype(np.float32)
  classifier = linear_model.LogisticRegression(max_iter=500)
  model = pipeline.Pipeline([("scale", preprocessing.StandardScaler()), ("classify", classifier)]).fit(x, y)
  check_classifier(convert(model, x, zipmap_of=classifier), x, model.predict(x), model.predict_proba(x))


@pytest.mark.parametrize("classes", [2, 3])
def test_linear_svc(classes):
  x, y = classification(classes)
  model = svm.LinearSVC(random_state=0).fit(x, y)  # no probabilities, so no ZipMap: scores are decision values
  scores = model.decision_function(x)
  check_classifier(convert(model, x), x, model.predict(x), scores.reshape(len(x), -1))


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kernel", ["rbf", "linear", "sigmoid"])
def test_svc(kernel, classes):
  x, y = classification(classes)
  model = svm.SVC(kernel=kernel, probability=False, gamma=0.1 if kernel == "sigmoid" else "scale").fit(x, y)
  ours, theirs = run_both(convert(model, x, zipmap_of=model), x)
  np.testing.assert_array_equal(ours[0], model.predict(x))
  np.testing.assert_array_equal(ours[0], theirs[0])
  assert_close(ours[1], theirs[1], RTOL_ORT, "scores vs onnxruntime")
  decision = model.decision_function(x)
  # a binary model's scores are libsvm's (-d, d), and libsvm's d is the negative of sklearn's decision
  if classes == 2: assert_close(ours[1][:, 0], decision, RTOL_SKLEARN, "decision vs sklearn")
  else: np.testing.assert_array_equal(ours[1].argmax(1), decision.argmax(1))  # ovr scores: the same best class


def test_svc_probabilities():
  # sklearn's probabilities come from libsvm in float64, ours in float32: the coupling's iterations stop at a
  # tolerance of 0.005 / classes, so a float32 sample may stop an iteration apart from float64's (here they agree
  # to 7e-7): 1e-4
  x, y = classification(3)
  model = svm.SVC(probability=True, random_state=0).fit(x, y)
  ours, theirs = run_both(convert(model, x, zipmap_of=model), x)
  np.testing.assert_array_equal(ours[0], model.predict(x))
  np.testing.assert_array_equal(ours[0], theirs[0])
  assert_close(ours[1], model.predict_proba(x), 1e-4, "probabilities vs sklearn")
  assert_close(ours[1], theirs[1], RTOL_ORT, "probabilities vs onnxruntime")


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("model", [tree.DecisionTreeClassifier(max_depth=4, random_state=0),
                                   ensemble.RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0),
                                   ensemble.GradientBoostingClassifier(n_estimators=5, max_depth=2, random_state=0)],
                         ids=["DecisionTreeClassifier", "RandomForestClassifier", "GradientBoostingClassifier"])
def test_tree_classifier(model, classes):
  x, y = classification(classes)
  model.fit(x, y)
  check_classifier(convert(model, x, zipmap_of=model), x, model.predict(x), model.predict_proba(x))


# ---------------------------------------------------------------------------------------------------- transformers
def test_min_max_scaler():
  x, _ = regression()
  model = preprocessing.MinMaxScaler().fit(x)
  check_values(convert(model, x), x, model.transform(x))


def test_standard_scaler():
  x, _ = regression()
  model = preprocessing.StandardScaler().fit(x)
  check_values(convert(model, x), x, model.transform(x))


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_normalizer(norm):
  x, _ = regression()
  model = preprocessing.Normalizer(norm=norm).fit(x)
  # onnxruntime's MAX divides a row by its largest value, not its largest magnitude as sklearn and onnx's reference
  # implementation do: a row of mostly negative values comes out far from sklearn's, so only sklearn is compared
  check_values(convert(model, x), x, model.transform(x), with_onnxruntime=norm != "max")


def test_simple_imputer():
  x, _ = regression()
  x[::3, 1], x[::5, 4] = np.nan, np.nan
  model = impute.SimpleImputer(strategy="mean").fit(x)
  check_values(convert(model, x), x, model.transform(x))


def test_one_hot_encoder_on_int_features():
  x = np.random.default_rng(0).integers(0, 4, (30, 3)).astype(np.int64)
  model = preprocessing.OneHotEncoder().fit(x)
  check_values(convert(model, x), x, model.transform(x).toarray())


# ---------------------------------------------------------------------------------------------------- refused
def test_zipmap_is_refused_with_the_remedy():
  x, y = classification(3)
  model = linear_model.LogisticRegression(max_iter=500).fit(x, y)
  with pytest.raises(OnnxError, match=r"ZipMap node .* sequence of maps.*\{\"zipmap\": False\}"):
    OnnxRunner(convert(model, x))


def test_string_class_labels_are_refused():
  x, y = classification(2)
  model = linear_model.LogisticRegression(max_iter=500).fit(x, np.array(["no", "yes"])[y])
  with pytest.raises(OnnxError, match="LinearClassifier node .* attribute 'classlabels_strings' holds strings"):
    OnnxRunner(convert(model, x, zipmap_of=model))


# ---------------------------------------------------------------------------------------------------- hand-built nodes
def ml_model(node: onnx.NodeProto, inputs: list, outputs: list) -> bytes:
  graph = helper.make_graph([node], "ml", inputs, outputs)
  opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
  return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_linear_classifier_post_transforms(transform):
  rng = np.random.default_rng(1)
  # PROBIT reads its scores as probabilities: small coefficients keep them in (0, 1)
  probit = transform == "PROBIT"
  coefficients = (rng.standard_normal((3, 4)) * (0.05 if probit else 1.0)).astype(np.float32)
  node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                          coefficients=coefficients.ravel().tolist(),
                          intercepts=[0.5, 0.4, 0.6] if probit else [0.5, -0.5, 0.0], classlabels_ints=[7, 8, 9],
                          post_transform=transform)
  data = ml_model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                  [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                   helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 3])])
  x = rng.standard_normal((16, 4)).astype(np.float32)
  x[0] = 0  # a row of zero scores before the intercepts
  ours, theirs = run_both(data, x)
  np.testing.assert_array_equal(ours[0], theirs[0])
  assert_close(ours[1], theirs[1], RTOL_ORT, f"{transform} scores vs onnxruntime")


def test_feature_vectorizer():
  node = helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain="ai.onnx.ml", inputdimensions=[2, 4])
  data = ml_model(node, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, 3]),
                         helper.make_tensor_value_info("b", TensorProto.FLOAT, [None, 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 6])])
  a = np.arange(12, dtype=np.float32).reshape(4, 3)
  b = -np.arange(8, dtype=np.float32).reshape(4, 2)
  got = OnnxRunner(data)({"a": a, "b": b})["y"].numpy()
  want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(got, np.concatenate([a[:, :2], b, np.zeros((4, 2))], axis=1))
