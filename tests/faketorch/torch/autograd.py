class _Engine:
    def __init__(self):
        self.callbacks = []

    def queue_callback(self, callback):
        self.callbacks.append(callback)


class Variable:
    _execution_engine = _Engine()
