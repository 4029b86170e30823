"""Unit tests for each redaction detector: positives, checksum negatives, and look-alikes."""

from __future__ import annotations

import pytest

from molt.governance.redaction import detectors
from molt.governance.redaction.checksums import iban_valid, luhn_valid, ssn_valid


def found(name: str, text: str) -> list[tuple[str, str]]:
    return [(s.entity_type, text[s.start : s.end]) for s in detectors.get(name)().detect(text)]


def test_luhn_and_card_numbers() -> None:
    assert luhn_valid("4539301019673114")
    assert not luhn_valid("4539301019673115")
    assert found("credit_card", "card 4539 3010 1967 3114 ok") == [("CREDIT_CARD", "4539 3010 1967 3114")]
    assert found("credit_card", "card 4539301019673115") == []  # Luhn fails
    assert found("credit_card", "order 1234567890123452") == []  # Luhn-valid but no issuer prefix


def test_iban_checksum() -> None:
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert not iban_valid("GB83 WEST 1234 5698 7654 32")  # check digits wrong
    assert not iban_valid("GB82 WEST 1234 5698 7654 3")  # wrong length for GB
    assert found("iban", "pay gb82west12345698765432 today") == [("IBAN_CODE", "gb82west12345698765432")]
    assert found("iban", "IBAN GB82 WEST 1234 5698 7654 32 and more") == [("IBAN_CODE", "GB82 WEST 1234 5698 7654 32")]
    assert found("iban", "IBAN GB83WEST12345698765432") == []


def test_ssn_rules() -> None:
    assert ssn_valid("364-21-3719")
    assert not ssn_valid("000-21-3719") and not ssn_valid("666-21-3719") and not ssn_valid("912-21-3719")
    assert not ssn_valid("364-00-3719") and not ssn_valid("364-21-0000")
    assert found("us_ssn", "SSN: 364-21-3719") == [("US_SSN", "364-21-3719")]
    assert found("us_ssn", "id 364213719") == []  # bare digits need a cue
    assert found("us_ssn", "my social security number is 364213719") == [("US_SSN", "364213719")]


def test_email_and_url() -> None:
    assert found("email", "mail KosaraReisl@fleckens.hu.") == [("EMAIL_ADDRESS", "KosaraReisl@fleckens.hu")]
    assert found("url", "see https://www.FunnyTan.co.nz/. Thanks") == [("DOMAIN_NAME", "https://www.FunnyTan.co.nz/")]
    assert found("url", "visit example.com today") == [("DOMAIN_NAME", "example.com")]
    assert found("url", "edit models.py and README.md") == []  # file names are not domains
    # the scheme regex runs only where a URL can start: each scheme before "://", each "www." in any case
    text = "x HTTPS://a.example/p and WWW.B.example, ftp://c.example\nsee www.d.example"
    assert [v for _t, v in found("url", text)] == [
        "HTTPS://a.example/p", "WWW.B.example", "ftp://c.example", "www.d.example"
    ]  # fmt: skip


def test_ip_addresses() -> None:
    assert found("ip", "from 10.218.6.131 and d80:e4b5:79da:6cf6:71f3:51f7:9161:c319") == [
        ("IP_ADDRESS", "10.218.6.131"),
        ("IP_ADDRESS", "d80:e4b5:79da:6cf6:71f3:51f7:9161:c319"),
    ]
    assert found("ip", "version 1.2.3.4.5 and 300.1.1.1 at 12:40:13") == []


@pytest.mark.parametrize(
    "phone",
    [
        "(227)664-8546x506",
        "+1-203-305-2492x5662",
        "916.972.1680x22008",
        "032 696 10 69",
        "06-10446904",
        "(11) 4706-6184",
    ],
)
def test_phone_formats(phone: str) -> None:
    assert found("phone", f"call me at {phone}, thanks") == [("PHONE_NUMBER", phone)]


def test_phone_look_alikes() -> None:
    assert found("phone", "on 1993-10-20 and 12/11/1952, order 12345, ip 74.34.59.240") == []


def test_driver_license_needs_context() -> None:
    assert found("us_driver_license", "My driver's license number is A125325867") == [
        ("US_DRIVER_LICENSE", "A125325867")
    ]
    assert found("us_driver_license", "the order number is A125325867") == []


def test_secrets() -> None:
    token = "ghp_" + "a1B2" * 9
    assert found("api_key", f"export GITHUB_TOKEN={token}") == [("API_KEY", token)]
    assert found("api_key", "key AKIAIOSFODNN7EXAMPLE here") == [("API_KEY", "AKIAIOSFODNN7EXAMPLE")]
    assert found("api_key", "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345") == [
        ("API_KEY", "abcdefghijklmnopqrstuvwxyz012345")
    ]
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    assert found("private_key", f"key:\n{pem}\n") == [("PRIVATE_KEY", pem)]
    assert ("PASSWORD", "hunter22") in found("password", "db password=hunter22 host=x")
    assert ("PASSWORD", "s3cr3t!") in found("password", "postgres://app:s3cr3t!@db:5432/x")
    assert found("password", "password: null") == []


def test_date_time_is_opt_in() -> None:
    assert found("date_time", "on 1993-10-20 12:40:13 and Saturday") == [
        ("DATE_TIME", "1993-10-20 12:40:13"),
        ("DATE_TIME", "Saturday"),
    ]


def test_entities() -> None:
    spans = found("entities", "Yesterday Christine Sørensen flew from Reykjavík to Latvia.")
    assert ("PERSON", "Christine Sørensen") in spans
    assert ("LOCATION", "Reykjavík") in spans and ("LOCATION", "Latvia") in spans
    assert ("ORGANIZATION", "Keychain Logistics Corp.") in found(
        "entities", "She works at Keychain Logistics Corp. now"
    )
    addr = found("entities", "Please send it to 52 Rua Joaquim de Oliveira Cruz 1615 Suite 498, Curitiba 80010 today")
    assert addr and addr[0][0] == "ADDRESS" and addr[0][1].startswith("52 Rua Joaquim")
    assert found("entities", "Please run the tests and fix the build.") == []
