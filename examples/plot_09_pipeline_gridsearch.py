"""
Pipelines and grid search
=========================

Every fastkpca estimator is a scikit-learn transformer: it goes into a
:class:`~sklearn.pipeline.Pipeline`, and :class:`~sklearn.model_selection.GridSearchCV`
tunes its parameters (``gamma``, ``n_components``, ``n_landmarks``, ...) with the
``step__parameter`` names, as for any scikit-learn step. Here: classify hand-written
digits with a linear classifier on a Nystrom KPCA embedding, and choose the kernel's
scale and the number of components by cross-validation.
"""

# %%
# The pipeline
# ------------
# The pendigits sample shipped with fastkpca: 3498 digits, each 8 pen positions (16
# numbers), with its label 0-9. 2000 rows tune and fit the pipeline; the other 1498
# test it.
import matplotlib.pyplot as plt
import numpy as np
from fastkpca import NystromKPCA
from fastkpca.datasets import load_demo
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

X, y = load_demo()
X_train, y_train, X_test, y_test = X[:2000], y[:2000], X[2000:], y[2000:]

pipeline = Pipeline(
    [
        ("scale", StandardScaler()),
        ("kpca", NystromKPCA(n_landmarks=200, random_state=0)),
        ("classify", LogisticRegression(max_iter=2000)),
    ]
)

# %%
# The grid search
# ---------------
# 3 values of the rbf kernel's ``gamma`` times 3 numbers of components, each scored by
# 3-fold cross-validation: 27 fits of the pipeline.
grid = {
    "kpca__gamma": [0.01, 0.1, 1.0],
    "kpca__n_components": [4, 16, 32],
}
search = GridSearchCV(pipeline, grid, cv=3).fit(X_train, y_train)
print("best parameters:", search.best_params_)
print(f"cross-validated accuracy: {search.best_score_:.3f}")
print(f"accuracy on the 1498 test rows: {search.score(X_test, y_test):.3f}")

# %%
# The mean cross-validated accuracy of each pair: too small a ``gamma`` (a kernel wider
# than the data) or too few components lose accuracy.
scores = search.cv_results_["mean_test_score"].reshape(
    len(grid["kpca__gamma"]), len(grid["kpca__n_components"])
)
fig, ax = plt.subplots(figsize=(5.5, 3.8))
image = ax.imshow(scores, cmap="viridis", aspect="auto")
ax.set_xticks(range(scores.shape[1]), grid["kpca__n_components"])
ax.set_yticks(range(scores.shape[0]), grid["kpca__gamma"])
ax.set_xlabel("n_components")
ax.set_ylabel("gamma")
for (i, j), value in np.ndenumerate(scores):
    ax.text(j, i, f"{value:.3f}", ha="center", va="center", color="w", fontsize=9)
fig.colorbar(image, label="mean accuracy, 3-fold cross-validation")
fig.tight_layout()
plt.show()

# %%
# The fitted step is reached as in any pipeline: here the Nystrom model the best
# pipeline was refitted with, on all 2000 training rows.
best_kpca = search.best_estimator_.named_steps["kpca"]
print(best_kpca)
print("eigenvalues:", best_kpca.eigenvalues_[:4].round(1))
