from tinycore import Tensor
a, b = Tensor.rand(4, 4), Tensor.rand(4, 4)
print(((a @ b).relu() + 1).sum(axis=1).numpy())
