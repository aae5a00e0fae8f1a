# %% [markdown] part_title="MLP forward and backward core"
# # Part 1 · The MLP core: forward and backward by hand
#
# Every technique in this course (accumulating gradients, recomputing
# activations, halving precision, splitting work across workers, sharding the
# optimizer) changes *where* the numbers of a training step live, never *what*
# they are. So first you need a training step you understand down to the last
# array: here you build one, a two-layer perceptron with its loss and
# gradients, in plain NumPy.
#
# **Goals of this part**
#
# - make a reproducible batch of data and initialise parameters (001–002);
# - compute the forward pass and what it must keep for later (003–005);
# - compute the loss and send its gradient back through every layer (006–010);
# - train the network with your own functions and watch the loss fall.
#
# **How a lesson works.** Each lesson has seven sections: *Intuition, Concepts,
# Math, Implementation, Tests, Common mistakes, Checkpoint*. Fill in the
# function under *Implementation* (replace `raise NotImplementedError(...)`),
# then run the *Tests* cell. Passing tests earn 5 XP; the panel below tracks
# your progress. Stuck? The solved notebook is `solutions/01_mlp_core.ipynb`.
#
# **Conventions.** A batch `X` has shape (batch, features); a weight matrix `W`
# has shape (fan_in, fan_out), so a layer is `X @ W + b`. Arrays are float64
# unless said otherwise, and no function changes its inputs.

# %% tags=["setup"]
# Set-up (read-only): run this cell first.
import numpy as np
import matplotlib.pyplot as plt

from shared.checking import CheckFailure, call, check, check_call, check_equal, check_memory, check_raises, check_shape
from shared.checking import check_rules  # the rules for graded code (shared.policy)
from shared.mistakes import mistakes_of
from shared.notebook import setup_notebook
from shared.plotting import plot_loss_curve
from shared.progress import lesson_passed, show_progress

setup_notebook()

# %% tags=["nbval-ignore-output", "demo"]
# The panel is live: it updates as test cells pass or fail (nbval cannot compare a live output).
show_progress("01_mlp_core")

# %% [markdown]
# ## 001 · Make synthetic regression batch
#
# ### Intuition
#
# To test a training loop you want data with a known answer that you can
# regenerate exactly. We draw random inputs, push them through a hidden
# "teacher" function, and ask the network to learn it. A seed makes the draws
# repeatable, so your run and the grader's see the same numbers.
#
# ### Concepts
#
# - **Random generator**: `rng = np.random.default_rng(seed)` is NumPy's modern
#   generator. Every draw advances it, so the *order* of draws fixes the numbers.
# - **Teacher weights** `W_true`, shape (in_features, out_features), hidden
#   from the network.
#
# ### Math
#
# With $B$ the batch size, $d$ the input features and $m$ the outputs:
#
# $$X_{ij} \sim \mathcal{N}(0, 1), \qquad (W_{\text{true}})_{jk} \sim \mathcal{N}\!\left(0, \tfrac{1}{d}\right), \qquad Y = \sin\!\left(X W_{\text{true}}\right).$$
#
# Scaling $W_{\text{true}}$ by $1/\sqrt{d}$ keeps each entry of $X W_{\text{true}}$
# at unit variance: it is a sum of $d$ products, each of variance $1/d$. The
# sine makes the target non-linear, so the hidden layer has work to do.
#
# ### Implementation

# %% tags=["solution"]
def make_synthetic_regression_batch(batch_size, in_features, out_features, seed):
    """A reproducible regression batch ``(X, Y)``.

    Args:
        batch_size, in_features, out_features: positive integers (a Python int or a NumPy integer).
        seed: int, the seed of ``np.random.default_rng``.

    Returns:
        X: (batch_size, in_features) float64, drawn first with ``rng.standard_normal``.
        Y: (batch_size, out_features) float64, ``np.sin(X @ W_true)`` where
           ``W_true = rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)``
           is drawn second, from the same generator.

    Raises:
        ValueError: if a size is not a positive integer: less than 1, or not an int at all
            (a float, even 3.0, or a bool).
    """
    ### BEGIN SOLUTION
    for name, size in (("batch_size", batch_size), ("in_features", in_features),
                       ("out_features", out_features)):
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, in_features))
    W_true = rng.standard_normal((in_features, out_features)) / np.sqrt(in_features)
    Y = np.sin(X @ W_true)
    return X, Y
    ### END SOLUTION

# %% [markdown]
# ### Tests
#
# `X` for seed 0 is a fact about NumPy's generator, so it is written out; the
# other checks are properties of any correct answer.

# %% tags=["tests"]
batch = call(make_synthetic_regression_batch, 2, 3, 2, seed=0, returns=("X", "Y"))
check(type(batch) is tuple, f"return the pair as a tuple, `return X, Y`; got a {type(batch).__name__}")
X, Y = batch
check_shape(X, (2, 3), "X")
check_shape(Y, (2, 2), "Y")
check(X.dtype == np.float64 and Y.dtype == np.float64,
      f"X and Y should be float64, got {X.dtype} and {Y.dtype}")
check_equal(X, np.array([[0.12573022, -0.13210486, 0.64042265],
                         [0.10490012, -0.53566937, 0.36159505]]), "X for seed 0",
            atol=1e-8, mistakes=mistakes_of("make_synthetic_regression_batch"),
            mistake_args=(2, 3, 2, 0), mistake_view=lambda batch: batch[0])
check(np.all(np.abs(Y) <= 1.0), "Y should lie in [-1, 1]: it is a sine")
X_again, Y_again = call(make_synthetic_regression_batch, 2, 3, 2, seed=0, returns=("X", "Y"))
check(np.array_equal(X, X_again) and np.array_equal(Y, Y_again),
      "the same seed must give the same batch: create the generator from `seed` inside the function")
X_other, _ = call(make_synthetic_regression_batch, 2, 3, 2, seed=1, returns=("X", "Y"))
check(not np.array_equal(X, X_other), "different seeds should give different batches")
# NumPy integers are sizes too:
X_numpy, _ = call(make_synthetic_regression_batch, np.int64(2), np.int64(3), np.int64(2), seed=0, returns=("X", "Y"))
check(np.array_equal(X, X_numpy), "np.int64(2) is a size like 2: accept NumPy integers (np.integer)")
# Bad sizes are refused with ValueError (0, negative, or not an int: 2.5, 3.0 and True are not):
good = {"batch_size": 4, "in_features": 3, "out_features": 2, "seed": 0}
for name, bad in (("batch_size", 0), ("in_features", -1), ("out_features", 0), ("out_features", 2.5),
                  ("batch_size", 3.0), ("in_features", True)):
    check_raises(make_synthetic_regression_batch, {**good, name: bad}, ValueError, f"{name} is {bad!r}")
lesson_passed("001")

# %% [markdown]
# ### Common mistakes
#
# - **W_true drawn before X.** Swapping the draws changes the numbers. The
#   tests name this mistake.
# - **The legacy global generator.** `np.random.seed(seed)` with
#   `np.random.randn` (or `RandomState`) gives other numbers than
#   `default_rng(seed)`, and changes global state.
# - **Forgetting the sine or the $1/\sqrt{d}$.** Right shapes, wrong targets.
#
# ### Checkpoint
#
# A seed now fixes the batch on any machine. *Self-check:* if you call the
# function twice with seed 3, then once with seed 4, which of the three batches
# are equal, and why does the order of `rng` calls inside the function matter?

# %% [markdown]
# ## 002 · Init MLP params
#
# ### Intuition
#
# A network starts from random weights. Too small, and the signal shrinks layer
# after layer; too large, and it explodes. He initialisation picks the scale
# that keeps activations roughly the same size through ReLU layers.
#
# ### Concepts
#
# - The parameters `W1`, `b1`, `W2`, `b2` live in one dict.
# - **fan_in**: a layer's number of inputs, the first axis of its `W`.
# - Biases start at zero: the random weights already break the symmetry between units.
#
# ### Math
#
# For a layer with $n_{\text{in}}$ inputs, He initialisation draws
#
# $$W_{jk} \sim \mathcal{N}\!\left(0, \frac{2}{n_{\text{in}}}\right), \qquad b_k = 0 .$$
#
# Why the 2: a pre-activation $z = \sum_{j=1}^{n_{\text{in}}} a_j W_{jk}$ has
# variance $n_{\text{in}} \operatorname{Var}(W)\,\mathbb{E}[a^2]$, and ReLU zeroes
# half of its inputs, so $\mathbb{E}[a^2] = \tfrac12 \operatorname{Var}(z_{\text{prev}})$.
# Choosing $\operatorname{Var}(W) = 2/n_{\text{in}}$ keeps $\operatorname{Var}(z)$
# constant across layers.
#
# ### Implementation

# %% tags=["solution"]
def init_mlp_params(in_features, hidden, out_features, seed):
    """He-initialised parameters of the two-layer MLP.

    Args:
        in_features, hidden, out_features: positive ints, the layer widths.
        seed: int, the seed of one ``np.random.default_rng``.

    Returns:
        dict with float64 arrays
            "W1": (in_features, hidden), "b1": (hidden,),
            "W2": (hidden, out_features), "b2": (out_features,).
        ``W1`` is drawn first, then ``W2``, each as ``rng.standard_normal(shape) * np.sqrt(2 / fan_in)``;
        the biases are zeros.
    """
    ### BEGIN SOLUTION
    rng = np.random.default_rng(seed)
    W1 = rng.standard_normal((in_features, hidden)) * np.sqrt(2.0 / in_features)
    W2 = rng.standard_normal((hidden, out_features)) * np.sqrt(2.0 / hidden)
    return {"W1": W1, "b1": np.zeros(hidden), "W2": W2, "b2": np.zeros(out_features)}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
params = call(init_mlp_params, 8, 5, 3, seed=7)
check(isinstance(params, dict), f"init_mlp_params should return a dict, got {type(params).__name__}")
check(set(params) == {"W1", "b1", "W2", "b2"},
      f"the keys should be W1, b1, W2, b2; got {sorted(params)}")
check_shape(params["W1"], (8, 5), "W1", "W has shape (fan_in, fan_out)")
check_shape(params["W2"], (5, 3), "W2", "W has shape (fan_in, fan_out)")
check_equal(params["b1"], np.zeros(5), "b1")
check_equal(params["b2"], np.zeros(3), "b2")
# The first two numbers of default_rng(7) are 0.00123015 and 0.29874554; W1 is drawn first.
check_equal(params["W1"][0, :2], np.array([0.00123015, 0.29874554]) * np.sqrt(2 / 8), "W1[0, :2]",
            atol=1e-8, mistakes=mistakes_of("init_mlp_params"), mistake_args=(8, 5, 3, 7),
            mistake_view=lambda p: p["W1"][0, :2])
check_equal(init_mlp_params(8, 5, 3, seed=7), params, "a second call with the same seed")
# Large layers, whose sample standard deviations are within 0.5% of the true ones:
big = call(init_mlp_params, 400, 300, 60, seed=0)
check(abs(big["W1"].std() - np.sqrt(2 / 400)) < 0.002,
      f"W1's standard deviation is {big['W1'].std():.4f}; He initialisation gives sqrt(2/fan_in) = {np.sqrt(2 / 400):.4f}")
check(abs(big["W2"].std() - np.sqrt(2 / 300)) < 0.002,
      f"W2's standard deviation is {big['W2'].std():.4f}; its fan_in is 300, so it should be {np.sqrt(2 / 300):.4f}")
lesson_passed("002")

# %% [markdown]
# ### Common mistakes
#
# - **LeCun/Xavier scale instead of He.** `sqrt(1 / fan_in)` is right for tanh
#   networks; with ReLU the activations then shrink by $\sqrt{2}$ per layer.
# - **2/fan_in as the standard deviation.** $2/n_{\text{in}}$ is the *variance*;
#   multiply by its square root, `np.sqrt(2 / fan_in)`.
# - **Scaling by fan_out.** The sum runs over a unit's *inputs*: use fan_in.
# - **W stored as (fan_out, fan_in)**, PyTorch's `nn.Linear` layout; here `W`
#   is (fan_in, fan_out).
# - **A new generator per layer.** Re-creating `default_rng(seed)` for `W2`
#   makes it start with the same numbers as `W1`.
#
# ### Checkpoint
#
# Signal can now flow through ReLU layers from the first step.
# *Self-check:* with `in_features = 8`, what is the standard deviation of the
# entries of `W1`, and why would it be the wrong one for `W2` when `hidden = 32`?

# %% [markdown]
# ## 003 · Linear forward
#
# ### Intuition
#
# A linear layer mixes its inputs: each output unit is a weighted sum of all
# input units plus an offset. Stacking a batch's examples as rows makes the
# whole batch one matrix product: the batch costs memory, not code.
#
# ### Concepts
#
# - `x`: (batch, fan_in), one example per row; `W`: (fan_in, fan_out); `b`: (fan_out,).
# - **Broadcasting**: adding `b` of shape (fan_out,) to a (batch, fan_out)
#   array adds it to every row.
#
# ### Math
#
# $$Z = xW + \mathbf{1}b^{\top}, \qquad Z_{ik} = \sum_{j=1}^{n_{\text{in}}} x_{ij} W_{jk} + b_k ,$$
#
# where $\mathbf{1}$ is a column of ones (broadcasting, in NumPy).
# Shapes: $(B \times n_{\text{in}})(n_{\text{in}} \times n_{\text{out}}) = B \times n_{\text{out}}$.
#
# ### Implementation

# %% tags=["solution"]
def linear_forward(x, W, b):
    """The affine layer ``x @ W + b``.

    Args:
        x: (batch, fan_in) array.
        W: (fan_in, fan_out) array.
        b: (fan_out,) array.

    Returns:
        Z: (batch, fan_out) array, same dtype as the inputs.
    """
    ### BEGIN SOLUTION
    return x @ W + b
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
x = np.array([[1.0, 2.0],
              [3.0, 4.0],
              [5.0, 6.0]])                 # (batch=3, fan_in=2)
W = np.array([[1.0, 0.0, -1.0],
              [0.5, 2.0, 0.0]])            # (fan_in=2, fan_out=3)
b = np.array([0.1, 0.2, 0.3])              # (fan_out=3,)
check_call(linear_forward, {"x": x, "W": W, "b": b},
           np.array([[2.1, 4.2, -0.7],
                     [5.1, 8.2, -2.7],
                     [8.1, 12.2, -4.7]]),
           mistakes=mistakes_of("linear_forward"))
# A square layer, where W and W.T have the same shape:
check_call(linear_forward, {"x": np.array([[1.0, 0.0]]), "W": np.array([[1.0, 2.0], [3.0, 4.0]]),
                            "b": np.zeros(2)},
           np.array([[1.0, 2.0]]), mistakes=mistakes_of("linear_forward"))
# float32 in, float32 out:
z32 = call(linear_forward, x.astype(np.float32), W.astype(np.float32), b.astype(np.float32))
check(isinstance(z32, np.ndarray) and z32.dtype == np.float32,
      f"float32 inputs should give a float32 result, got {getattr(z32, 'dtype', type(z32))}")
lesson_passed("003")

# %% [markdown]
# ### Common mistakes
#
# - **Forgetting the bias.** Right shapes, but every row is off by `b`; the
#   tests name it.
# - **`x @ W.T`.** That is the layer in PyTorch's layout; here `W` is already
#   (fan_in, fan_out). With a square `W` the shapes even match, so only the
#   values tell.
# - **Looping over the batch.** Right answer, but hundreds of times slower
#   than one matrix product.
#
# ### Checkpoint
#
# A layer is one matrix product and one broadcast add. *Self-check:* for
# `x` of shape (32, 8) and `W` of shape (8, 16), what are the shapes of `b` and of
# the output, and how many multiply-adds does the product take?

# %% [markdown]
# ## 004 · ReLU forward
#
# ### Intuition
#
# Without a non-linearity, two linear layers collapse into one. ReLU, "keep
# positives, zero the rest", is the simplest fix: cheap, with a gradient of 0 or 1.
#
# ### Concepts
#
# - Element-wise: the output has the input's shape and dtype.
# - **Pure function**: return a new array and leave `z` untouched.
#
# ### Math
#
# $$\operatorname{relu}(z) = \max(z, 0) = \begin{cases} z & z > 0 \\ 0 & z \le 0 \end{cases}$$
#
# applied to every entry.
#
# ### Implementation

# %% tags=["solution"]
def relu_forward(z):
    """Element-wise ReLU, ``max(z, 0)``.

    Args:
        z: array of any shape (float).

    Returns:
        A new array of the same shape and dtype; ``z`` itself is not modified.
    """
    ### BEGIN SOLUTION
    return np.maximum(z, 0)
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
z = np.array([[-2.0, -0.0, 0.5],
              [3.0, -1e-9, 0.0]])
check_call(relu_forward, {"z": z}, np.array([[0.0, 0.0, 0.5],
                                             [3.0, 0.0, 0.0]]),
           mistakes=mistakes_of("relu_forward"))
check_call(relu_forward, {"z": np.array([-1.0, 2.0, -3.0, 4.0])}, np.array([0.0, 2.0, 0.0, 4.0]),
           mistakes=mistakes_of("relu_forward"))
check_call(relu_forward, {"z": np.array([0.5, 2.0])}, np.array([0.5, 2.0]),
           fresh=True)  # nothing negative: still a new array
check_call(relu_forward, {"z": np.zeros((0, 3))}, np.zeros((0, 3)))  # any shape, even one with no entry
for dtype in (np.float32, np.float16):  # the result keeps the input's dtype, whatever it is
    r = call(relu_forward, np.array([-1.0, 1.0], dtype=dtype))
    check(isinstance(r, np.ndarray) and r.dtype == dtype,
          f"relu_forward should keep {np.dtype(dtype).name}, got {getattr(r, 'dtype', type(r))}")
first, second = call(relu_forward, z.copy()), call(relu_forward, z.copy())
check(not np.shares_memory(first, second),
      "two calls returned the same array: each call must return a new one (the second call overwrote the first "
      "caller's result)")
lesson_passed("004")

# %% [markdown]
# ### Common mistakes
#
# - **Changing the input in place** (`z[z < 0] = 0`). Right numbers, but it
#   destroys the caller's `z`, which the backward pass needs. The tests check
#   that your inputs are unchanged.
# - **`np.max` instead of `np.maximum`.** `np.max(z, 0)` is a *reduction* over
#   axis 0 and returns a smaller array.
# - **Returning the mask** `z > 0`: that is ReLU's derivative, not ReLU.
#
# ### Checkpoint
#
# ReLU is an element-wise gate that must leave its input alone. *Self-check:*
# why would an in-place ReLU save memory, and why does the backward pass make
# that saving dangerous here?

# %% [markdown]
# ## 005 · MLP forward
#
# ### Intuition
#
# The forward pass chains linear, ReLU, linear, and decides what to
# *remember*: the backward pass needs each linear layer's input and each
# ReLU's pre-activation, so they go into a cache. That cache is the activation
# memory that Parts 3 and 7 will fight.
#
# ### Concepts
#
# - `X`: (batch, in_features); `params` from lesson 002; `Z1` and `A1`:
#   (batch, hidden); `Y_hat`: (batch, out_features).
# - **cache**: a dict `{"A0": X, "Z1": Z1, "A1": A1}`. Naming the input `A0`
#   lets deeper networks (the course's helper MLP) extend the scheme
#   `A0, Z1, A1, Z2, A2, ...`.
#
# ### Math
#
# $$Z_1 = X W_1 + b_1, \qquad A_1 = \operatorname{relu}(Z_1), \qquad \hat Y = A_1 W_2 + b_2 .$$
#
# The last layer has no ReLU: a regression output may be negative.
#
# ### Implementation

# %% tags=["solution"]
def mlp_forward(X, params):
    """Forward pass of the two-layer MLP.

    Args:
        X: (batch, in_features) array.
        params: dict with "W1" (in_features, hidden), "b1" (hidden,),
            "W2" (hidden, out_features), "b2" (out_features,).

    Returns:
        Y_hat: (batch, out_features) array.
        cache: dict with exactly the keys "A0" (the input X), "Z1" (batch, hidden)
            the first layer's pre-activation, and "A1" = relu(Z1) (batch, hidden).
    Use your ``linear_forward`` and ``relu_forward``.
    """
    ### BEGIN SOLUTION
    Z1 = linear_forward(X, params["W1"], params["b1"])
    A1 = relu_forward(Z1)
    Y_hat = linear_forward(A1, params["W2"], params["b2"])
    return Y_hat, {"A0": X, "Z1": Z1, "A1": A1}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
X = np.array([[1.0, -1.0],
              [2.0, 0.5]])                                   # (batch=2, in=2)
tiny = {"W1": np.array([[1.0, -1.0, 0.5],
                        [2.0, 1.0, -1.0]]), "b1": np.array([0.0, 0.5, -0.5]),
        "W2": np.array([[1.0], [-2.0], [0.5]]), "b2": np.array([0.25])}
# Z1 = X @ W1 + b1 = [[-1, -1.5, 1], [3, -1, 0]]  and  A1 = relu(Z1) = [[0, 0, 1], [3, 0, 0]]
expected_cache = {"A0": X,
                  "Z1": np.array([[-1.0, -1.5, 1.0], [3.0, -1.0, 0.0]]),
                  "A1": np.array([[0.0, 0.0, 1.0], [3.0, 0.0, 0.0]])}
check_call(mlp_forward, {"X": X, "params": tiny},
           (np.array([[0.75], [3.25]]), expected_cache), mistakes=mistakes_of("mlp_forward"))
# With b2 = -5 the outputs are negative, which a ReLU on the output would hide:
check_call(mlp_forward, {"X": X, "params": {**tiny, "b2": np.array([-5.0])}},
           (np.array([[-4.5], [-2.0]]), expected_cache), mistakes=mistakes_of("mlp_forward"))
Y_hat, cache = call(mlp_forward, np.zeros((5, 2)), tiny, returns=("Y_hat", "cache"))
check_shape(Y_hat, (5, 1), "Y_hat for a batch of 5")
check(set(cache) == {"A0", "Z1", "A1"}, f"cache should have the keys A0, Z1, A1; got {sorted(cache)}")
lesson_passed("005")

# %% [markdown]
# ### Common mistakes
#
# - **ReLU on the output layer.** The network can never predict a negative
#   value, so the loss stalls on negative targets.
# - **No ReLU at all.** $XW_1W_2$ is one linear map: the hidden layer adds nothing.
# - **Caching the wrong arrays** (`Z1` and `A1` swapped, or not caching `X`).
#   The output is right, the gradients wrong.
#
# ### Checkpoint
#
# The forward pass returns a prediction *and* the memory of how it got there.
# *Self-check:* for a batch of $B$ examples and a hidden width $H$, how many
# float64 numbers does the cache hold beyond the input, and how many bytes is that?

# %% [markdown]
# ## 006 · MSE loss and grad
#
# ### Intuition
#
# The loss turns a batch of predictions into one number to minimise. Its
# gradient is where backpropagation starts: how much each prediction should
# move to lower the loss.
#
# ### Concepts
#
# - `Y_hat`, `Y`: (batch, out_features). The mean is over **all** $B \cdot m$ entries.
# - The loss is a Python `float`; the gradient `dY_hat` has `Y_hat`'s shape and dtype.
#
# ### Math
#
# $$L = \frac{1}{Bm} \sum_{i=1}^{B} \sum_{k=1}^{m} \left(\hat Y_{ik} - Y_{ik}\right)^2,
# \qquad \frac{\partial L}{\partial \hat Y_{ik}} = \frac{2}{Bm}\left(\hat Y_{ik} - Y_{ik}\right).$$
#
# The $\frac{1}{Bm}$ is inside the gradient. So in Part 2, when a batch is split
# into micro-batches, each must be weighted by its share of the entries, not
# averaged on its own.
#
# ### Implementation

# %% tags=["solution"]
def mse_loss_and_grad(Y_hat, Y):
    """Mean squared error over all entries and its gradient.

    Args:
        Y_hat: (batch, out_features) predictions.
        Y: (batch, out_features) targets.

    Returns:
        loss: Python float, mean of (Y_hat - Y)**2 over every entry.
        dY_hat: array shaped like Y_hat, 2 * (Y_hat - Y) / Y_hat.size.
    """
    ### BEGIN SOLUTION
    diff = Y_hat - Y
    return float(np.mean(diff ** 2)), 2.0 * diff / diff.size
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
Y_hat = np.array([[1.0, 2.0], [3.0, 5.0]])
Y = np.array([[1.0, 0.0], [2.0, 5.0]])
# differences: [[0, 2], [1, 0]] -> loss (0 + 4 + 1 + 0) / 4 = 1.25
check_call(mse_loss_and_grad, {"Y_hat": Y_hat, "Y": Y},
           (1.25, np.array([[0.0, 1.0], [0.5, 0.0]])), mistakes=mistakes_of("mse_loss_and_grad"))
loss, _ = call(mse_loss_and_grad, Y, Y, returns=("loss", "dY_hat"))
check(loss == 0.0, f"the loss of a perfect prediction should be 0, got {loss}")
check(isinstance(loss, float), f"the loss should be a Python float, got {type(loss).__name__}")
loss, _ = call(mse_loss_and_grad, np.array([[np.nan, 1.0]]), np.array([[0.0, 1.0]]), returns=("loss", "dY_hat"))
check(np.isnan(loss), f"a NaN prediction gives a NaN loss (the mean of every entry), got {loss}: a mean that "
      f"skips NaN (np.nanmean) hides a model that has diverged")
# float32 inputs: the gradient stays float32 and the loss is still a Python float (not np.float32):
check_call(mse_loss_and_grad, {"Y_hat": np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32),
                               "Y": np.array([[1.0, 0.0], [2.0, 5.0]], dtype=np.float32)},
           (1.25, np.array([[0.0, 1.0], [0.5, 0.0]], dtype=np.float32)), mistakes=mistakes_of("mse_loss_and_grad"))
# The gradient is the slope: a small step against it lowers the loss.
rng = np.random.default_rng(0)
Y_hat, Y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
loss, dY_hat = call(mse_loss_and_grad, Y_hat, Y, returns=("loss", "dY_hat"))
loss_after, _ = call(mse_loss_and_grad, Y_hat - 1e-3 * dY_hat / np.linalg.norm(dY_hat), Y,
                     returns=("loss", "dY_hat"))
check(loss_after < loss, "a small step against dY_hat should lower the loss: check the gradient's sign")
lesson_passed("006")

# %% [markdown]
# ### Common mistakes
#
# - **Gradient summed instead of averaged**: `2 * (Y_hat - Y)` without the
#   `/ Y_hat.size`. The loss is an average, so its gradient is $Bm$ times smaller.
# - **Averaging over the batch only** (`/ len(Y)`): the mean of per-example
#   *sums*, a different loss.
# - **Forgetting the 2** or flipping the sign (`Y - Y_hat`): gradient descent then
#   moves *up* the loss.
#
# ### Checkpoint
#
# The loss is a mean, and so is its gradient. *Self-check:* if you double the
# batch size while keeping the per-example errors the same, what happens to
# the loss, and to each entry of `dY_hat`?

# %% [markdown]
# ## 007 · Linear backward
#
# ### Intuition
#
# Backpropagation asks each layer: "given how the loss changes with your
# output, how does it change with your input and your parameters?" For a
# linear layer, the answers come from arrays you already have: the upstream
# gradient, the cached input and the weights.
#
# ### Concepts
#
# - `dZ`: (batch, fan_out), the gradient of the loss w.r.t. the layer's output;
#   `x`: (batch, fan_in), the input cached by the forward pass; `W`: (fan_in, fan_out).
# - A gradient has the shape of its variable: `dx` like `x`, `dW` like `W`,
#   `db` like `b`. The shapes alone place the transposes.
#
# ### Math
#
# From $Z = xW + \mathbf{1}b^{\top}$ and the chain rule:
#
# $$\frac{\partial L}{\partial x} = \frac{\partial L}{\partial Z} W^{\top}, \qquad
# \frac{\partial L}{\partial W} = x^{\top} \frac{\partial L}{\partial Z}, \qquad
# \frac{\partial L}{\partial b} = \sum_{i=1}^{B} \left(\frac{\partial L}{\partial Z}\right)_{i,:} .$$
#
# Shapes: $(B \times n_{\text{out}})(n_{\text{out}} \times n_{\text{in}})$,
# $(n_{\text{in}} \times B)(B \times n_{\text{out}})$, and a sum over the batch axis,
# because the same $b$ was added to every row.
#
# ### Implementation

# %% tags=["solution"]
def linear_backward(dZ, x, W):
    """Gradients of the affine layer ``Z = x @ W + b``.

    Args:
        dZ: (batch, fan_out) gradient of the loss w.r.t. Z.
        x: (batch, fan_in) the layer's input from the forward pass.
        W: (fan_in, fan_out) the layer's weights.

    Returns:
        (dx, dW, db): arrays of shapes (batch, fan_in), (fan_in, fan_out), (fan_out,).
    """
    ### BEGIN SOLUTION
    return dZ @ W.T, x.T @ dZ, dZ.sum(axis=0)
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
dZ = np.array([[1.0, 0.0, -1.0],
               [2.0, 1.0, 0.0]])             # (batch=2, fan_out=3)
x = np.array([[1.0, 2.0],
              [0.0, -1.0]])                 # (batch=2, fan_in=2)
W = np.array([[1.0, 2.0, 3.0],
              [0.0, 1.0, -1.0]])            # (fan_in=2, fan_out=3)
check_call(linear_backward, {"dZ": dZ, "x": x, "W": W},
           (np.array([[-2.0, 1.0], [4.0, 1.0]]),                 # dx = dZ @ W.T
            np.array([[1.0, 0.0, -1.0], [0.0, -1.0, -2.0]]),     # dW = x.T @ dZ
            np.array([3.0, 1.0, -1.0])),                         # db = dZ summed over the batch
           mistakes=mistakes_of("linear_backward"))
check_call(linear_backward, {"dZ": dZ[:, :1], "x": x, "W": W[:, :1]},     # one output feature: db has shape (1,)
           (np.array([[1.0, 0.0], [2.0, 0.0]]), np.array([[1.0], [0.0]]), np.array([3.0])),
           mistakes=mistakes_of("linear_backward"))
# Property: for a loss L = sum(Z * G), the gradient w.r.t. Z is G, and a finite
# difference in W must agree with your dW.
rng = np.random.default_rng(1)
x, W, G = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
_, dW, _ = call(linear_backward, G, x, W, returns=("dx", "dW", "db"))
E = np.zeros_like(W); E[1, 0] = 1e-6
numeric = (np.sum((x @ (W + E)) * G) - np.sum((x @ (W - E)) * G)) / 2e-6
check(abs(dW[1, 0] - numeric) < 1e-6,
      f"dW[1, 0] = {dW[1, 0]:.6f} but a finite difference gives {numeric:.6f}")
# float32 in, float32 out (all three gradients):
check_call(linear_backward, {"dZ": np.array([[1.0, 0.0, -1.0], [2.0, 1.0, 0.0]], dtype=np.float32),
                             "x": np.array([[1.0, 2.0], [0.0, -1.0]], dtype=np.float32),
                             "W": np.array([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0]], dtype=np.float32)},
           (np.array([[-2.0, 1.0], [4.0, 1.0]], dtype=np.float32),
            np.array([[1.0, 0.0, -1.0], [0.0, -1.0, -2.0]], dtype=np.float32),
            np.array([3.0, 1.0, -1.0], dtype=np.float32)), mistakes=mistakes_of("linear_backward"))
lesson_passed("007")

# %% [markdown]
# ### Common mistakes
#
# - **dW without the transpose**: `dZ.T @ x` has shape (fan_out, fan_in), the
#   transpose of `W`'s.
# - **Bias gradient not summed over the batch**: `db = dZ` has shape
#   (batch, fan_out), not (fan_out,).
# - **Bias gradient averaged** (`dZ.mean(axis=0)`): the $1/B$ of the loss is
#   already inside `dZ`; dividing again shrinks `db` by the batch size.
#
# ### Checkpoint
#
# A linear layer's backward pass is two matrix products and a sum. *Self-check:*
# which of `dx`, `dW`, `db` need the cached input `x`, and which need `W`? (This
# decides what the forward pass must keep.)

# %% [markdown]
# ## 008 · ReLU backward
#
# ### Intuition
#
# ReLU let positive pre-activations through and blocked the rest. Backwards it
# does the same to the gradient: it flows where the gate was open and stops
# where it was shut.
#
# ### Concepts
#
# - `dA`: gradient w.r.t. ReLU's output; `Z`: ReLU's input from the forward pass; same shape.
# - The **mask** `Z > 0` is all ReLU needs to remember; as a NumPy bool array
#   it costs 1 byte per entry instead of 8.
# - At exactly $z = 0$ ReLU has no derivative; by convention we use 0.
# - A shut gate passes nothing, not even an `inf` or NaN in `dA` (from a
#   diverging step): the result there is 0. Multiplying by the mask would not
#   do it: `inf * 0` is NaN (as `z * (z > 0)` was in 004).
#
# ### Math
#
# $$\frac{\partial L}{\partial Z_{ij}} = \begin{cases} \dfrac{\partial L}{\partial A_{ij}} & Z_{ij} > 0 \\
#   0 & \text{otherwise.} \end{cases}$$
#
# ### Implementation

# %% tags=["solution"]
def relu_backward(dA, Z):
    """Gradient through ReLU.

    Args:
        dA: gradient w.r.t. relu(Z), any shape.
        Z: ReLU's input from the forward pass, same shape as dA.

    Returns:
        dZ: ``dA`` where ``Z > 0`` and 0 elsewhere (also where Z == 0); same shape and dtype as dA.
    """
    ### BEGIN SOLUTION
    return np.where(Z > 0, dA, 0.0)  # a Python 0.0 keeps dA's dtype; a shut gate gives 0 even for inf or NaN
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
dA = np.array([[1.0, -2.0, 3.0],
               [-4.0, 5.0, 6.0]])
Z = np.array([[0.5, 1.0, -1.0],
              [2.0, 0.0, -3.0]])
check_call(relu_backward, {"dA": dA, "Z": Z},
           np.array([[1.0, -2.0, 0.0],
                     [-4.0, 0.0, 0.0]]), mistakes=mistakes_of("relu_backward"))
check_call(relu_backward, {"dA": dA, "Z": np.abs(Z) + 1.0}, dA.copy(),
           fresh=True)  # every gate open: still a new array
# inf and NaN in dA where the gate is shut: 0 there (dA * mask would give NaN); where it is open they pass
check_call(relu_backward, {"dA": np.array([np.inf, np.nan, -np.inf, np.inf]), "Z": np.array([-1.0, 0.0, -2.0, 3.0])},
           np.array([0.0, 0.0, 0.0, np.inf]), mistakes=mistakes_of("relu_backward"))
for dtype in (np.float32, np.float16):  # the result keeps dA's dtype, whatever it is
    d = call(relu_backward, dA.astype(dtype), Z)
    check(isinstance(d, np.ndarray) and d.dtype == dtype,
          f"relu_backward should keep dA's dtype ({np.dtype(dtype).name} here), got {getattr(d, 'dtype', type(d))}")
lesson_passed("008")

# %% [markdown]
# ### Common mistakes
#
# - **Mask taken from the wrong array**: `dA * (dA > 0)` gates on the *gradient's*
#   sign; the gate was set in the forward pass, by `Z`.
# - **Returning the mask alone**: `(Z > 0)` is ReLU's derivative; the chain rule
#   multiplies it by the upstream gradient.
# - **`Z >= 0`**: lets the gradient through where $Z$ is exactly zero. Rare with
#   random floats, common after a previous ReLU, and the tests include zeros.
#
# ### Checkpoint
#
# ReLU's backward selects by a 0/1 mask fixed in the forward pass.
# *Self-check:* could the backward pass use `A = relu(Z)` instead of `Z` to build
# the mask? What would that change in what the forward pass must store?

# %% [markdown]
# ## 009 · First linear backward
#
# ### Intuition
#
# The first layer's input is the data, and nothing upstream learns from its
# gradient. `dX` would be a (batch, in_features) array of wasted work and
# memory; real frameworks skip it, and so do we.
#
# ### Concepts
#
# - `dZ1`: (batch, hidden), `X`: (batch, in_features), `W1`: (in_features, hidden).
# - Returns only the parameter gradients `(dW1, db1)`; the tests measure the
#   call's memory, so a `dX` computed and thrown away shows.
#
# ### Math
#
# $$\frac{\partial L}{\partial W_1} = X^{\top} \frac{\partial L}{\partial Z_1}, \qquad
# \frac{\partial L}{\partial b_1} = \sum_{i=1}^{B} \left(\frac{\partial L}{\partial Z_1}\right)_{i,:},$$
#
# and no $\partial L / \partial X$.
#
# ### Implementation

# %% tags=["solution"]
def first_linear_backward(dZ1, X, W1):
    """Parameter gradients of the first layer (no gradient for the data X).

    Args:
        dZ1: (batch, hidden) gradient w.r.t. the first layer's output Z1.
        X: (batch, in_features) the network's input.
        W1: (in_features, hidden) the first layer's weights (not needed for these
            gradients; kept so the signature matches ``linear_backward``).

    Returns:
        (dW1, db1): arrays of shapes (in_features, hidden) and (hidden,).
    """
    ### BEGIN SOLUTION
    return X.T @ dZ1, dZ1.sum(axis=0)
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
dZ1 = np.array([[1.0, -1.0],
                [0.5, 2.0],
                [0.0, 1.0]])                 # (batch=3, hidden=2)
X = np.array([[1.0, 0.0, 2.0],
              [2.0, 1.0, 0.0],
              [-1.0, 1.0, 1.0]])             # (batch=3, in=3)
W1 = np.ones((3, 2))
check_call(first_linear_backward, {"dZ1": dZ1, "X": X, "W1": W1},
           (np.array([[2.0, 2.0], [0.5, 3.0], [2.0, -1.0]]), np.array([1.5, 2.0])),
           mistakes=mistakes_of("first_linear_backward"))
# float32 in, float32 out (as in 007), and one hidden unit: db1 keeps its shape (1,)
check_call(first_linear_backward, {"dZ1": dZ1.astype(np.float32), "X": X.astype(np.float32),
                                   "W1": W1.astype(np.float32)},
           (np.array([[2.0, 2.0], [0.5, 3.0], [2.0, -1.0]], np.float32), np.array([1.5, 2.0], np.float32)),
           mistakes=mistakes_of("first_linear_backward"))
check_call(first_linear_backward, {"dZ1": dZ1[:, :1], "X": X, "W1": W1[:, :1]},
           (np.array([[2.0], [0.5], [2.0]]), np.array([1.5])), mistakes=mistakes_of("first_linear_backward"))
# The point, measured: on a long batch dX would be 2048 x 64 numbers (1 MiB); dW1 and db1 are 1.5 KiB.
rng = np.random.default_rng(9)
X_long, dZ1_long, W1_long = rng.standard_normal((2048, 64)), rng.standard_normal((2048, 3)), np.ones((64, 3))
check_memory(first_linear_backward, {"dZ1": dZ1_long, "X": X_long, "W1": W1_long}, 4 * (64 * 3 + 3) * 8 + 64 * 1024,
             "four times the bytes of dW1 and db1, plus 64 KiB: compute no dX = dZ1 @ W1.T")
lesson_passed("009")

# %% [markdown]
# ### Common mistakes
#
# - **Computing dX anyway**, and returning three values. The caller expects
#   two; the tests name it.
# - **dW without the transpose** and **db not summed over the batch**, as in lesson 007.
# - **Returning (db1, dW1)**: the order is (dW1, db1), weights first, as in lesson 007.
#
# ### Checkpoint
#
# The first layer's gradients need its input, not its weights. *Self-check:*
# for a batch of 4096 examples with 1024 input features in float32, how many
# bytes does skipping `dX` save?

# %% [markdown]
# ## 010 · MLP backward
#
# ### Intuition
#
# Chain the backward pieces in the reverse order of the forward pass: second
# linear layer, ReLU, first linear layer. Each step consumes part of the cache,
# so the cache must live until backward reaches it.
#
# ### Concepts
#
# - `dY_hat` comes from `mse_loss_and_grad`, `params` from `init_mlp_params`,
#   `cache` from `mlp_forward`.
# - `grads` has the same keys and shapes as `params`.
#
# ### Math
#
# $$\frac{\partial L}{\partial W_2} = A_1^{\top}\,\delta_2, \quad
# \frac{\partial L}{\partial b_2} = \mathbf{1}^{\top}\delta_2, \quad
# \delta_1 = \left(\delta_2 W_2^{\top}\right) \odot \mathbb{1}[Z_1 > 0], \quad
# \frac{\partial L}{\partial W_1} = X^{\top}\delta_1, \quad
# \frac{\partial L}{\partial b_1} = \mathbf{1}^{\top}\delta_1 ,$$
#
# with $\delta_2 = \partial L / \partial \hat Y$ and $\odot$ the element-wise product.
#
# ### Implementation

# %% tags=["solution"]
def mlp_backward(dY_hat, params, cache):
    """Gradients of the loss w.r.t. every parameter of the two-layer MLP.

    Args:
        dY_hat: (batch, out_features) gradient of the loss w.r.t. the output.
        params: dict "W1", "b1", "W2", "b2" (see ``init_mlp_params``).
        cache: dict "A0", "Z1", "A1" from ``mlp_forward``.

    Returns:
        grads: dict with keys "W1", "b1", "W2", "b2", each shaped like the parameter.
    Use your ``linear_backward``, ``relu_backward`` and ``first_linear_backward``.
    """
    ### BEGIN SOLUTION
    dA1, dW2, db2 = linear_backward(dY_hat, cache["A1"], params["W2"])
    dZ1 = relu_backward(dA1, cache["Z1"])
    dW1, db1 = first_linear_backward(dZ1, cache["A0"], params["W1"])
    return {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}
    ### END SOLUTION

# %% [markdown]
# ### Tests

# %% tags=["tests"]
# The tiny network of lesson 005, with dY_hat = [[1], [-1]]:
tiny = {"W1": np.array([[1.0, -1.0, 0.5],
                        [2.0, 1.0, -1.0]]), "b1": np.array([0.0, 0.5, -0.5]),
        "W2": np.array([[1.0], [-2.0], [0.5]]), "b2": np.array([0.25])}
tiny_cache = {"A0": np.array([[1.0, -1.0], [2.0, 0.5]]),
              "Z1": np.array([[-1.0, -1.5, 1.0], [3.0, -1.0, 0.0]]),
              "A1": np.array([[0.0, 0.0, 1.0], [3.0, 0.0, 0.0]])}
# dA1 = dY_hat @ W2.T = [[1, -2, 0.5], [-1, 2, -0.5]];  mask Z1 > 0 = [[0, 0, 1], [1, 0, 0]]
# dZ1 = [[0, 0, 0.5], [-1, 0, 0]];  dW1 = X.T @ dZ1;  dW2 = A1.T @ dY_hat
check_call(mlp_backward, {"dY_hat": np.array([[1.0], [-1.0]]), "params": tiny, "cache": tiny_cache},
           {"W1": np.array([[-2.0, 0.0, 0.5], [-0.5, 0.0, -0.5]]), "b1": np.array([-1.0, 0.0, 0.5]),
            "W2": np.array([[-3.0], [0.0], [1.0]]), "b2": np.array([0.0])},
           mistakes=mistakes_of("mlp_backward"))
# Property: every gradient agrees with a finite difference of the loss.
rng = np.random.default_rng(2)
X_fd, Y_fd = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
p_fd = {"W1": rng.standard_normal((3, 4)), "b1": rng.standard_normal(4),
        "W2": rng.standard_normal((4, 2)), "b2": rng.standard_normal(2)}
def loss_and_grad_at(p):
    out, cache = call(mlp_forward, X_fd, p, returns=("Y_hat", "cache"))
    return call(mse_loss_and_grad, out, Y_fd, returns=("loss", "dY_hat")), cache

(_, dY_fd), c = loss_and_grad_at(p_fd)
grads = call(mlp_backward, dY_fd, p_fd, c)
for key in ("W1", "b1", "W2", "b2"):
    step = np.zeros_like(p_fd[key]); step.flat[0] = 1e-6
    up = loss_and_grad_at({**p_fd, key: p_fd[key] + step})[0][0]
    down = loss_and_grad_at({**p_fd, key: p_fd[key] - step})[0][0]
    check(abs(grads[key].flat[0] - (up - down) / 2e-6) < 1e-6,
          f"grads[{key!r}] disagrees with a finite difference: {grads[key].flat[0]:.6f} vs {(up - down) / 2e-6:.6f}")
lesson_passed("010")

# %% [markdown]
# ### Common mistakes
#
# - **Skipping the ReLU backward**: passing `dA1` straight to the first layer,
#   as if the network had no non-linearity.
# - **dW2 from `Z1` instead of `A1`**: the second layer's input was the
#   activation, not the pre-activation.
# - **Bias gradients not summed** over the batch (see lesson 007).
#
# ### Checkpoint
#
# Backward runs the forward pass in reverse, consuming the cache. *Self-check:*
# at which moment of a training step is the most memory in use, and which
# arrays are alive then?

# %% [markdown]
# ## Putting it together: train the MLP with your own functions
#
# One training step is forward, loss, backward, then the update
# $\theta \leftarrow \theta - \eta \, \nabla_\theta L$. The loop below uses only
# your functions: if the curve falls steadily, every piece works.

# %% tags=["demo"]
X_train, Y_train = make_synthetic_regression_batch(256, 8, 2, seed=0)
params = init_mlp_params(8, 32, 2, seed=1)
learning_rate = 0.1
losses = []
for step in range(300):
    Y_hat, cache = mlp_forward(X_train, params)
    loss, dY_hat = mse_loss_and_grad(Y_hat, Y_train)
    grads = mlp_backward(dY_hat, params, cache)
    params = {key: params[key] - learning_rate * grads[key] for key in params}
    losses.append(loss)
print(f"loss after step 1: {losses[0]:.4f}, after step {len(losses)}: {losses[-1]:.4f}")
plot_loss_curve(losses, title="Your two-layer MLP on the synthetic batch")
plt.show()

# %% [markdown]
# ## Part summary
#
# - A training step is forward (storing a cache), loss, backward (consuming it)
#   and update; you checked each piece against finite differences.
# - What the forward pass stores, `A0`, `Z1`, `A1`, is the **activation memory**;
#   it grows with the batch size and the depth. Part 2 shrinks it by splitting
#   the batch (gradient accumulation); Part 3 by storing less and recomputing
#   (activation checkpointing).
# - The loss is a mean over the batch, so the gradients are too: in Part 2,
#   micro-batches of unequal size must be weighted, not averaged.
#
# Run `make progress` in a terminal to see your XP across the whole course.
