"""A stand-in for Kaggle's kaggle_secrets module (tests/slow/test_kaggle.c puts
this folder on PYTHONPATH). UserSecretsClient().get_secret(label) answers from
the file named by SW_KAGGLE_SECRETS: the kaggle-secrets.txt that
`shardwire cluster init` writes for each bundle (lines `LABEL VALUE`, '#'
comments), so the test checks that those are the secrets the notebooks read.
Like Kaggle's, an unknown label raises an error."""
import os


class BackendError(Exception):
    pass


class UserSecretsClient:
    def __init__(self):
        path = os.environ.get("SW_KAGGLE_SECRETS", "")
        self._values = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                label, _, value = line.partition(" ")
                self._values[label] = value.strip()

    def get_secret(self, label):
        if label not in self._values:
            raise BackendError(f"No user secrets exist for label {label!r}")
        return self._values[label]
