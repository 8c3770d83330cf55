"""JAX with its default memory preallocation (one arena of most of the GPU's memory):
a jitted MLP training step with grad.

usage: python3 jax_mlp.py [--no-command-buffers]
--no-command-buffers: XLA launches every kernel itself rather than through CUDA graphs.
Runs 60 steps; prints the loss every 10 steps, rounded.
"""

from __future__ import annotations

import os
import sys

FLAGS = "--xla_gpu_deterministic_ops=true"
if "--no-command-buffers" in sys.argv[1:]:
    FLAGS += " --xla_gpu_enable_command_buffer="
os.environ.setdefault("XLA_FLAGS", FLAGS)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def init(key: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
    sizes = [64, 512, 512, 256, 10]
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (n_in, n_out)) / jnp.sqrt(n_in),
                       jnp.zeros(n_out)))
    return params


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return loss, jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)


def main() -> int:
    key = jax.random.PRNGKey(0)
    params = init(key)
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.normal(kx, (512, 64))
    y = jax.nn.one_hot(jax.random.randint(ky, (512,), 0, 10), 10)
    for i in range(1, 61):
        loss, params = step(params, x, y)
        if i % 10 == 0:
            print(f"step {i} loss {float(loss):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
