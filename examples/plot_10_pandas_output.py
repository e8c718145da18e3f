"""
DataFrames in, DataFrames out: set_output
=========================================

fastkpca estimators follow scikit-learn's ``set_output`` API: after
``set_output(transform="pandas")``, ``transform`` and ``fit_transform`` return a
:class:`pandas.DataFrame` whose columns are named by ``get_feature_names_out`` and whose
index is that of the input frame. The same call on a pipeline sets it for every step.
"""

# %%
# A DataFrame in
# --------------
# The pendigits sample as a frame: the x and y pen coordinates at 8 points of each
# hand-written digit, and the digit itself.
import matplotlib.pyplot as plt
import pandas as pd
from fastkpca import RandomFeatureKPCA
from fastkpca.datasets import load_demo
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

X, y = load_demo()
columns = [f"{axis}{point}" for point in range(1, 9) for axis in ("x", "y")]
frame = pd.DataFrame(X, columns=columns)
frame.index.name = "sample"
print(frame.iloc[:3, :6])

# %%
# A DataFrame out
# ---------------
model = RandomFeatureKPCA(
    n_components=3, gamma="median", n_random_features=500, random_state=0
)
model.set_output(transform="pandas")
embedding = model.fit_transform(frame)
print(type(embedding).__name__, embedding.shape)
print(embedding.head(3))
print("feature_names_in_:", list(model.feature_names_in_[:4]), "...")
print("get_feature_names_out():", list(model.get_feature_names_out()))

# %%
# The column names are ``model.get_feature_names_out()``, and the index is the
# input's, so the embedding joins the other columns of the data directly:
embedding["digit"] = y
print(embedding.groupby("digit").mean().round(2).head(4))

fig, ax = plt.subplots(figsize=(6, 4.5))
first, second = embedding.columns[:2]
for digit, group in embedding.groupby("digit"):
    ax.scatter(group[first], group[second], s=4, label=str(digit))
ax.set_xlabel(f"{first} (first component)")
ax.set_ylabel(f"{second} (second component)")
ax.legend(title="digit", markerscale=3, fontsize=8, ncols=2)
fig.tight_layout()
plt.show()

# %%
# In a pipeline
# -------------
# ``set_output`` on a pipeline applies to each of its steps: the scaler's output keeps
# the column names, and the KPCA step names its own.
pipeline = make_pipeline(
    StandardScaler(),
    RandomFeatureKPCA(
        n_components=3, gamma=0.05, n_random_features=500, random_state=0
    ),
).set_output(transform="pandas")
print(pipeline.fit_transform(frame).head(3))
