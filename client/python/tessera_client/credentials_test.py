"""The CLI's credential rules: the token from token_file, else the file
$TESSERA_TOKEN_FILE names, else $TESSERA_TOKEN; one valid token only."""
import os
import tempfile
import unittest

from tessera_client.credentials import resolve

TOKEN = "0123456789abcdef0123"


class CredentialsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_the_argument_file_wins_over_the_environment(self):
        path = self.write("a.token", "# mine\n\n%s\n" % TOKEN)
        other = self.write("b.token", "b" * 20)
        env = {"TESSERA_TOKEN_FILE": other, "TESSERA_TOKEN": "c" * 20}
        self.assertEqual(resolve(None, None, None, path, env).token, TOKEN)
        self.assertEqual(resolve(None, None, None, None, env).token, "b" * 20)
        self.assertEqual(resolve(None, None, None, None, {"TESSERA_TOKEN": "c" * 20}).token,
                         "c" * 20)
        self.assertIsNone(resolve(None, None, None, None, {}).token)

    def test_bad_tokens_name_their_source(self):
        for text, why in (("short", "at least"), ("%s\n%s" % (TOKEN, TOKEN), "exactly one"),
                          ("\n# none\n", "exactly one"), ("", "empty")):
            path = self.write("bad.token", text)
            with self.assertRaisesRegex(ValueError, "token_file.*" + why):
                resolve(None, None, None, path, {})
        with self.assertRaisesRegex(ValueError, "TESSERA_TOKEN: a token must be printable"):
            resolve(None, None, None, None, {"TESSERA_TOKEN": "with a space in it ok"})

    def test_tls_files_from_arguments_or_environment(self):
        ca = self.write("ca.pem", "CA")
        self.assertEqual(resolve(ca, None, None, None, {}).tls_ca, b"CA")
        self.assertEqual(resolve(None, None, None, None, {"TESSERA_TLS_CA": ca}).tls_ca, b"CA")
        with self.assertRaisesRegex(ValueError, "TESSERA_TLS_CA: cannot read"):
            resolve(None, None, None, None, {"TESSERA_TLS_CA": ca + ".missing"})
        with self.assertRaisesRegex(ValueError, "go together"):
            resolve(ca, ca, None, None, {})


if __name__ == "__main__":
    unittest.main()
